//! 12/CHP: kvmsg and every command parser (and the pair's PEERSYNC?) on arbitrary multipart
//! messages; what parses re-encodes to something that parses the same way.
#![no_main]
use bytes::Bytes;
use chp::KvMsg;
use chp::command::{IcanHaz, KvSet, SnapshotReply, Update, parse_peersync, peersync_message};
use libfuzzer_sys::fuzz_target;

#[path = "multipart.rs"]
mod multipart;

fuzz_target!(|data: &[u8]| {
    let msg = multipart::message(data);
    let frames: Vec<Bytes> = msg.frames().to_vec();
    if let Ok(kv) = KvMsg::parse(&frames) {
        let again = KvMsg::parse(kv.to_message().frames()).expect("a parsed kvmsg re-encodes");
        assert_eq!(again.to_message(), kv.to_message());
    }
    if let Ok(req) = IcanHaz::parse(&frames) {
        let _ = IcanHaz::parse(req.to_message().frames()).expect("ICANHAZ? round-trips");
    }
    let _ = SnapshotReply::parse(&frames);
    if let Some(freshness) = parse_peersync(&frames) {
        // A pair peer's PEERSYNC?, with or without its epoch and sequence: round-trips.
        assert_eq!(parse_peersync(peersync_message(freshness).frames()), Some(freshness));
    }
    let _ = Update::parse(&frames);
    let _ = KvSet::parse(&frames);
    if let Some(first) = frames.first() {
        let _ = chp::kvmsg::check_key(first);
        let _ = chp::kvmsg::parse_sequence(first);
        let _ = chp::kvmsg::parse_uuid(first);
        let _ = chp::kvmsg::Properties::parse(first);
        let _ = chp::Subtree::new(first.clone());
    }
});
