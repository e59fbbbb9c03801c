//! Codec micro-benchmarks (issue 9): ZMTP frames encoded and decoded per second, by body size.
//!
//! `cargo bench -p zmtp-tokio --bench codec` (add `-- --quick` for a short run). Each iteration handles a
//! batch of frames so that the per-frame cost, not the harness, is measured:
//!
//! - `encode/<size>`: `FrameCodec::encode` of a batch into one reused buffer (header + body copy).
//! - `encode_header/<size>`: `encode_header` alone, the writer's path for frames it sends by
//!   reference (bodies over 16 KiB) — what a zero-copy large frame costs to frame.
//! - `decode/<size>`: `FrameCodec::decode` of a buffer holding a batch of frames, until empty (the
//!   bodies are split off as `Bytes`, no copy; the buffer is filled and freed outside the timing).
//! - `decode_multipart/64`: 3-frame messages (MORE flags), decoded frame by frame.

use bytes::{Bytes, BytesMut};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use zmtp::wire::frame::{FLAG_MORE, encode_header};
use zmtp::wire::{Frame, FrameCodec};

const SIZES: [usize; 5] = [16, 64, 1024, 16 * 1024, 64 * 1024];

/// Frames per iteration: enough to amortise the loop, small enough to stay in cache for small sizes.
fn batch(size: usize) -> usize {
    (1 << 20) / (size + 9).max(64)
}

fn encoded(size: usize, n: usize, more_every: Option<usize>) -> Bytes {
    let body = Bytes::from(vec![0xA5u8; size]);
    let mut out = BytesMut::new();
    let mut codec = FrameCodec::default();
    for i in 0..n {
        let more = more_every.is_some_and(|k| (i + 1) % k != 0);
        codec.encode(Frame::message(body.clone(), more), &mut out);
    }
    out.freeze()
}

fn encode(c: &mut Criterion) {
    let mut g = c.benchmark_group("encode");
    for size in SIZES {
        let n = batch(size);
        let body = Bytes::from(vec![0xA5u8; size]);
        let mut codec = FrameCodec::default();
        let mut out = BytesMut::with_capacity(n * (size + 9));
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::from_parameter(size), |b| {
            b.iter(|| {
                out.clear();
                for _ in 0..n {
                    codec.encode(Frame::message(body.clone(), false), &mut out);
                }
                black_box(out.len())
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("encode_header");
    for size in SIZES {
        let n = batch(size);
        let mut out = BytesMut::with_capacity(n * 9);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::from_parameter(size), |b| {
            b.iter(|| {
                out.clear();
                for i in 0..n {
                    encode_header(if i & 1 == 0 { FLAG_MORE } else { 0 }, black_box(size), &mut out);
                }
                black_box(out.len())
            })
        });
    }
    g.finish();
}

fn decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    for size in SIZES {
        let n = batch(size);
        let wire = encoded(size, n, None);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::from_parameter(size), |b| {
            b.iter_batched(
                || BytesMut::from(&wire[..]),
                |mut buf| {
                    let mut codec = FrameCodec::default();
                    let mut frames = 0usize;
                    while let Some(f) = codec.decode(&mut buf).unwrap() {
                        frames += black_box(f.body.len()) & 1;
                    }
                    // Returned, so the buffer's last reference (and its free) falls outside the timing.
                    (buf, frames)
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();

    let mut g = c.benchmark_group("decode_multipart");
    let n = batch(64);
    let wire = encoded(64, n, Some(3));
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(BenchmarkId::from_parameter(64), |b| {
        b.iter_batched(
            || BytesMut::from(&wire[..]),
            |mut buf| {
                let mut codec = FrameCodec::default();
                let mut more = 0usize;
                while let Some(f) = codec.decode(&mut buf).unwrap() {
                    more += f.more() as usize;
                }
                (buf, more)
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, encode, decode);
criterion_main!(benches);
