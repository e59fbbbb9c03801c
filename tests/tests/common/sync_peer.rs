//! The libzmq peer (tests/py/secure_peer.py) driven from plain threads, for the suites that run
//! without a tokio runtime (the hand-driven wire crate, the blocking API).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Stdio};

/// tests/py/secure_peer.py, read line by line (it ends itself after 40 s whatever happens).
pub struct Peer {
    child: Child,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl Peer {
    pub fn spawn(args: &[&str]) -> Peer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/py/secure_peer.py");
        let mut child = zmtp_testkit::python_with_pyzmq()
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot run python3 (needed with pyzmq for the interop tests)");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Peer { child, lines }
    }

    /// The rest of the next line, which must start with `word `.
    pub fn expect(&mut self, word: &str) -> String {
        let line = self.lines.next().expect("libzmq peer exited early").expect("reading the peer");
        match line.strip_prefix(word) {
            Some(rest) => rest.trim_start().to_owned(),
            None => panic!("expected {word:?} from the libzmq peer, got {line:?}"),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lower-case hex, as the peer script reads and prints frames.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
