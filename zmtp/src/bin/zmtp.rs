//! `zmtp`: a netcat for ZeroMQ (being written).
fn main() {}
