//! The perf tools keep libzmq's CLI contract: same arguments, same output lines.

use std::process::{Command, Stdio};

use zmtp_testkit::free_port;

fn lines(out: std::process::Output) -> Vec<String> {
    assert!(out.status.success(), "tool failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
}

#[test]
fn throughput_tools_print_libzmq_lines() {
    // Plain, and with the batch API (`--batch`: the coalescing sink and recv_many) on both ends.
    for extra in [&[][..], &["--batch"][..]] {
        let ep = format!("tcp://127.0.0.1:{}", free_port());
        let local = Command::new(env!("CARGO_BIN_EXE_local_thr"))
            .args([&ep, "100", "5000"])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // remote_thr connects and reconnects until local_thr is listening, so no start-up race.
        let remote =
            Command::new(env!("CARGO_BIN_EXE_remote_thr")).args([&ep, "100", "5000"]).args(extra).output().unwrap();
        assert!(remote.status.success());
        let out = lines(local.wait_with_output().unwrap());
        assert_eq!(out[0], "message size: 100 [B]");
        assert_eq!(out[1], "message count: 5000");
        assert!(out[2].starts_with("mean throughput: ") && out[2].ends_with(" [msg/s]"), "{out:?}");
        assert!(out[3].starts_with("mean throughput: ") && out[3].ends_with(" [Mb/s]"), "{out:?}");
    }
}

#[test]
fn latency_tools_print_libzmq_lines() {
    // Plain, and with `--busy-poll 50` on both ends.
    for extra in [&[][..], &["--busy-poll", "50"][..]] {
        latency_tools_with(extra);
    }
}

fn latency_tools_with(extra: &[&str]) {
    let ep = format!("tcp://127.0.0.1:{}", free_port());
    let local = Command::new(env!("CARGO_BIN_EXE_local_lat"))
        .args([&ep, "64", "200"])
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let out =
        lines(Command::new(env!("CARGO_BIN_EXE_remote_lat")).args([&ep, "64", "200"]).args(extra).output().unwrap());
    assert!(local.wait_with_output().unwrap().status.success());
    assert_eq!(out[0], "message size: 64 [B]");
    assert_eq!(out[1], "roundtrip count: 200");
    let latency: f64 =
        out[2].strip_prefix("average latency: ").unwrap().strip_suffix(" [us]").unwrap().parse().unwrap();
    assert!(latency > 0.0);
}

#[test]
fn wrong_arguments_print_usage() {
    for (tool, args) in [
        (env!("CARGO_BIN_EXE_local_thr"), &[][..]),
        (env!("CARGO_BIN_EXE_remote_lat"), &[][..]),
        (env!("CARGO_BIN_EXE_local_thr"), &["tcp://127.0.0.1:1", "1", "1", "--fast"][..]),
        (env!("CARGO_BIN_EXE_remote_lat"), &["tcp://127.0.0.1:1", "1", "1", "--busy-poll"][..]),
    ] {
        let out = Command::new(tool).args(args).output().unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"));
    }
}
