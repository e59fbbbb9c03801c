//! `zmtp rep` with nothing to answer (issue 13): with stdin closed it used to take one request,
//! print it and exit 0 without replying, leaving the REQ hanging. It now fails with a message that
//! names the problem; with --echo it answers. The REQ side is the real libzmq (pyzmq).

use std::process::{Command, Stdio};
use std::time::Duration;

use zmtp_testkit::{free_port, python_with_pyzmq};

const ZMTP: &str = env!("CARGO_BIN_EXE_zmtp");

/// A pyzmq REQ that sends `hello` to `endpoint` and prints the reply (or TIMEOUT).
fn libzmq_req(endpoint: &str) -> std::process::Child {
    let script = format!(
        "import zmq\nc=zmq.Context()\ns=c.socket(zmq.REQ)\ns.linger=0\ns.rcvtimeo=5000\ns.connect('{endpoint}')\n\
         s.send(b'hello')\ntry:\n    print(s.recv().decode())\nexcept zmq.Again:\n    print('TIMEOUT')\n"
    );
    python_with_pyzmq().args(["-c", &script]).stdout(Stdio::piped()).spawn().unwrap()
}

#[test]
fn rep_with_stdin_closed_says_it_has_no_reply_instead_of_leaving_the_req_hanging() {
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let rep = Command::new(ZMTP)
        .args(["rep", "--bind", &endpoint, "--timeout", "15"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200)); // let it bind (the REQ reconnects anyway)
    let req = libzmq_req(&endpoint);
    let rep = rep.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&rep.stderr);
    assert_eq!(rep.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no reply to send") && stderr.contains("--echo"), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&rep.stdout), "hello\n", "the request is printed");
    let req = req.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&req.stdout), "TIMEOUT\n");
}

#[test]
fn rep_with_echo_answers_a_libzmq_req() {
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let rep = Command::new(ZMTP)
        .args(["rep", "--bind", &endpoint, "--echo", "--count", "1", "--timeout", "15"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let req = libzmq_req(&endpoint).wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&req.stdout), "hello\n");
    let rep = rep.wait_with_output().unwrap();
    assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
}
