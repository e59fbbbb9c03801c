//! XSalsa20's keystream four (or eight) blocks at a time, for CURVE's message box (`curve_message.rs`).
//!
//! RustCrypto's `salsa20` 0.10 computes one 64-byte block at a time in scalar code: 124 µs for a
//! 64 KiB message here, six times the Poly1305 beside it, and the whole of why CURVE at 64 KiB ran at
//! half libzmq's speed (libsodium's Salsa20 is vectorized). This computes four consecutive blocks
//! (eight with AVX2, see [`LANES`]) side by side, each state word a vector of four lanes (`wide::u32x4`: SSE2 on any x86-64, NEON on
//! aarch64, plain arrays where there is neither), so that every step of a round is one vector
//! operation on four independent values. Arrays of four `u32` were not enough: the compiler kept
//! them scalar (no vector rotate on SSE2), 100–110 µs per 64 KiB; the vectors take it to ~42 µs.
//! On x86-64 builds that do not target AVX2 (the default), the CPU is asked once at run time
//! and, where it has AVX2, eight blocks are computed side by side in 256-bit vectors ([`avx2`],
//! through `pulp`'s safe, feature-checked intrinsics): 36 µs per 64 KiB instead of 44. Where it
//! has AVX-512, sixteen blocks in 512-bit vectors with a one-instruction rotate ([`avx512`]):
//! 19 µs per 64 KiB instead of 39 (same machine), and CURVE at 64 KiB from 0.87–0.99× libzmq's
//! throughput to 1.40×.
//! The tests hold every path to the `salsa20` crate byte for byte.

use zeroize::Zeroizing;

/// Blocks computed side by side: eight where the build targets AVX2 (`-C target-cpu=native` on
/// most x86-64 machines of the last decade, or `x86-64-v3`), where a 64 KiB keystream takes
/// 22–28 µs instead of 42; four elsewhere (eight in two SSE2 halves measured slower, 60 µs).
#[cfg(target_feature = "avx2")]
const LANES: usize = 8;
#[cfg(not(target_feature = "avx2"))]
const LANES: usize = 4;
/// Bytes of keystream per pass of the portable lanes.
pub(crate) const PASS: usize = 64 * LANES;
/// The keystream buffer: room for the widest pass this build may take at run time (the portable
/// one where the build has no other).
const PASS_BUF: usize = max(avx512::PASS, max(avx2::PASS, PASS));

const fn max(a: usize, b: usize) -> usize {
    if a > b { a } else { b }
}

/// The widest pass the CPU allows (asked once per process), or the portable lanes.
#[derive(Clone, Copy)]
enum Wide {
    Portable,
    Avx2(avx2::Token),
    Avx512(avx512::Token),
}

impl Wide {
    fn detect() -> Wide {
        if let Some(simd) = avx512::detect() {
            return Wide::Avx512(simd);
        }
        if let Some(simd) = avx2::detect() {
            return Wide::Avx2(simd);
        }
        Wide::Portable
    }
}

/// One state word across the lanes.
#[cfg(target_feature = "avx2")]
type Word = wide::u32x8;
#[cfg(not(target_feature = "avx2"))]
type Word = wide::u32x4;

/// Salsa20's input block for one key and nonce, the block counter in words 8 and 9.
pub(crate) struct SalsaLanes {
    input: Zeroizing<[u32; 16]>,
    /// The next pass's first block.
    block: u64,
    /// The widest pass the CPU has and this build may use.
    wide: Wide,
}

impl SalsaLanes {
    /// Salsa20/20 under `key` with the 8-byte `nonce`, from block 0.
    pub(crate) fn new(key: &[u8; 32], nonce: &[u8; 8]) -> SalsaLanes {
        let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let mut input = Zeroizing::new([0u32; 16]);
        // "expand 32-byte k", the key's halves, the nonce, the counter.
        input[0] = 0x6170_7865;
        input[5] = 0x3320_646e;
        input[10] = 0x7962_2d32;
        input[15] = 0x6b20_6574;
        for i in 0..4 {
            input[1 + i] = word(&key[4 * i..]);
            input[11 + i] = word(&key[16 + 4 * i..]);
        }
        input[6] = word(&nonce[..4]);
        input[7] = word(&nonce[4..]);
        SalsaLanes { input, block: 0, wide: Wide::detect() }
    }

    /// The next pass of keystream into the start of `out`; returns its length (the widest pass
    /// the CPU allows).
    fn next_pass_any(&mut self, out: &mut [u8; PASS_BUF]) -> usize {
        match self.wide {
            Wide::Avx512(simd) => {
                let out: &mut [u8; avx512::PASS] =
                    (&mut out[..avx512::PASS]).try_into().expect("PASS_BUF is the widest");
                avx512::next_pass(simd, &self.input, self.block, out);
                self.block = self.block.wrapping_add(avx512::LANES as u64);
                avx512::PASS
            }
            Wide::Avx2(simd) => {
                let out: &mut [u8; avx2::PASS] = (&mut out[..avx2::PASS]).try_into().expect("PASS_BUF is the widest");
                avx2::next_pass(simd, &self.input, self.block, out);
                self.block = self.block.wrapping_add(avx2::LANES as u64);
                avx2::PASS
            }
            Wide::Portable => {
                let portable: &mut [u8; PASS] = (&mut out[..PASS]).try_into().expect("PASS_BUF >= PASS");
                self.next_pass(portable);
                PASS
            }
        }
    }

    /// The next [`PASS`] bytes of keystream into `out`, from the portable lanes.
    pub(crate) fn next_pass(&mut self, out: &mut [u8; PASS]) {
        let mut x: [Word; 16] = core::array::from_fn(|i| Word::splat(self.input[i]));
        let blocks: [u64; LANES] = core::array::from_fn(|lane| self.block.wrapping_add(lane as u64));
        x[8] = Word::new(blocks.map(|b| b as u32));
        x[9] = Word::new(blocks.map(|b| (b >> 32) as u32));
        let start = x;
        for _ in 0..10 {
            // Column round, then row round.
            quarter(&mut x, 0, 4, 8, 12);
            quarter(&mut x, 5, 9, 13, 1);
            quarter(&mut x, 10, 14, 2, 6);
            quarter(&mut x, 15, 3, 7, 11);
            quarter(&mut x, 0, 1, 2, 3);
            quarter(&mut x, 5, 6, 7, 4);
            quarter(&mut x, 10, 11, 8, 9);
            quarter(&mut x, 15, 12, 13, 14);
        }
        let sums: [Word; 16] = core::array::from_fn(|i| add(x[i], start[i]));
        for (i, word) in sums.iter().enumerate() {
            for (lane, value) in word.as_array().iter().enumerate() {
                let at = 64 * lane + 4 * i;
                out[at..at + 4].copy_from_slice(&value.to_le_bytes());
            }
        }
        self.block = self.block.wrapping_add(LANES as u64);
    }
}

/// Salsa20's quarter round on words `a, b, c, d`, in every lane.
#[inline(always)]
fn quarter(x: &mut [Word; 16], a: usize, b: usize, c: usize, d: usize) {
    x[b] = xor(x[b], rotl(add(x[a], x[d]), 7));
    x[c] = xor(x[c], rotl(add(x[b], x[a]), 9));
    x[d] = xor(x[d], rotl(add(x[c], x[b]), 13));
    x[a] = xor(x[a], rotl(add(x[d], x[c]), 18));
}

#[inline(always)]
fn add(a: Word, b: Word) -> Word {
    a + b // lane-wise, wrapping
}

#[inline(always)]
fn xor(a: Word, b: Word) -> Word {
    a ^ b
}

#[inline(always)]
fn rotl(a: Word, n: u32) -> Word {
    (a << n) | (a >> (32 - n))
}

/// XSalsa20 for one box: the one-time Poly1305 key (the keystream's first 32 bytes) and the
/// stream after it, which encrypts the message.
pub(crate) struct XSalsaBox {
    lanes: SalsaLanes,
    /// Keystream of the current pass, its length, and how much of it is used. Wiped on drop as
    /// far as passes filled it (a volatile write per byte: a short box does not pay for the
    /// wide buffer).
    pass: [u8; PASS_BUF],
    pass_len: usize,
    used: usize,
}

impl XSalsaBox {
    /// The stream for `nonce` under the session key `key`, and its MAC key; `len` is how many
    /// bytes the box will encrypt (a hint: `apply` takes any amount).
    #[cfg(test)]
    pub(crate) fn new(key: &[u8; 32], nonce: &[u8; 24], len: usize) -> (XSalsaBox, Zeroizing<[u8; 32]>) {
        Self::with_wide(key, nonce, len, Wide::detect())
    }

    /// [`new`](Self::new) with the widest pass chosen (the tests take each the CPU has).
    #[cfg(test)]
    fn with_wide(key: &[u8; 32], nonce: &[u8; 24], len: usize, wide: Wide) -> (XSalsaBox, Zeroizing<[u8; 32]>) {
        let subkey = subkey(key, nonce[..16].try_into().expect("16 bytes"));
        Self::from_subkey_wide(&subkey, nonce[16..].try_into().expect("8 bytes"), len, wide)
    }

    /// The stream, and its MAC key, for the nonce whose first 16 bytes made `subkey` (see
    /// [`subkey`]) and whose last 8 are `nonce`; `len` as for a whole nonce.
    pub(crate) fn from_subkey(subkey: &[u8; 32], nonce: &[u8; 8], len: usize) -> (XSalsaBox, Zeroizing<[u8; 32]>) {
        Self::from_subkey_wide(subkey, nonce, len, Wide::detect())
    }

    fn from_subkey_wide(
        subkey: &[u8; 32],
        nonce: &[u8; 8],
        len: usize,
        wide: Wide,
    ) -> (XSalsaBox, Zeroizing<[u8; 32]>) {
        let mut lanes = SalsaLanes::new(subkey, nonce);
        // A box that one portable pass covers does not take a wider one: twice the keystream
        // for nothing (64 B CURVE messages went 35% slower).
        lanes.wide = if 32 + len <= PASS { Wide::Portable } else { wide };
        let mut pass = [0u8; PASS_BUF];
        let pass_len = lanes.next_pass_any(&mut pass);
        let mut mac_key = Zeroizing::new([0u8; 32]);
        mac_key.copy_from_slice(&pass[..32]);
        (XSalsaBox { lanes, pass, pass_len, used: 32 }, mac_key)
    }

    /// XORs `buf` with the stream's next bytes.
    pub(crate) fn apply(&mut self, mut buf: &mut [u8]) {
        while !buf.is_empty() {
            if self.used == self.pass_len {
                if buf.len() >= self.pass_len {
                    // Whole passes straight into the message (every pass has the same length).
                    let (whole, rest) = buf.split_at_mut(buf.len() / self.pass_len * self.pass_len);
                    for chunk in whole.chunks_exact_mut(self.pass_len) {
                        self.lanes.next_pass_any(&mut self.pass);
                        xor_into(chunk, &self.pass[..self.pass_len]);
                    }
                    buf = rest;
                    continue;
                }
                self.pass_len = self.lanes.next_pass_any(&mut self.pass);
                self.used = 0;
            }
            let n = buf.len().min(self.pass_len - self.used);
            let (now, rest) = buf.split_at_mut(n);
            xor_into(now, &self.pass[self.used..self.used + n]);
            self.used += n;
            buf = rest;
        }
    }
}

/// XSalsa20's first step: the Salsa20 key for every nonce that starts with `nonce_start` under `key`
/// (HSalsa20).
pub(crate) fn subkey(key: &[u8; 32], nonce_start: &[u8; 16]) -> Zeroizing<[u8; 32]> {
    use salsa20::cipher::consts::U10;
    use salsa20::cipher::generic_array::GenericArray;
    Zeroizing::new(salsa20::hsalsa::<U10>(GenericArray::from_slice(key), GenericArray::from_slice(nonce_start)).into())
}

impl Drop for XSalsaBox {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.pass[..self.pass_len].zeroize();
    }
}

fn xor_into(buf: &mut [u8], keystream: &[u8]) {
    for (b, k) in buf.iter_mut().zip(keystream) {
        *b ^= k;
    }
}

/// Eight blocks side by side in AVX2's 256-bit vectors, chosen at run time. `pulp` checks the CPU
/// once ([`pulp::x86::V3::try_new`]) and hands back a token whose intrinsics are safe to call;
/// `vectorize` compiles the pass with AVX2 enabled. Without the runtime choice, an x86-64 build
/// computes four blocks per pass in SSE2: 44 µs per 64 KiB, 36 with this (`print_timing` in
/// curve_message.rs); a CURVE 64 KiB box sealed and opened went from 6.9 k to 9.8 k a second.
#[cfg(all(target_arch = "x86_64", not(target_feature = "avx2"), not(zmtp_portable_salsa)))]
mod avx2 {
    use core::arch::x86_64::__m256i;
    use pulp::bytemuck::cast;
    use pulp::u32x8;
    use pulp::x86::V3;

    /// Blocks per pass.
    pub(super) const LANES: usize = 8;
    /// Bytes of keystream per pass.
    pub(super) const PASS: usize = 64 * LANES;
    /// Proof that the CPU has AVX2 (and the features `pulp` groups with it).
    pub(super) type Token = V3;

    /// The CPU's AVX2, checked once per process.
    pub(super) fn detect() -> Option<V3> {
        V3::try_new()
    }

    /// The pass starting at `block` into `out`, with AVX2 enabled for its code.
    pub(super) fn next_pass(simd: V3, input: &[u32; 16], block: u64, out: &mut [u8; PASS]) {
        simd.vectorize(Pass { simd, input, block, out });
    }

    /// A pass as `vectorize` takes it: its body must inline into the AVX2-enabled frame.
    struct Pass<'a> {
        simd: V3,
        input: &'a [u32; 16],
        block: u64,
        out: &'a mut [u8; PASS],
    }

    impl pulp::NullaryFnOnce for Pass<'_> {
        type Output = ();

        #[inline(always)]
        fn call(self) {
            let Pass { simd, input, block, out } = self;
            let mut x: [u32x8; 16] = core::array::from_fn(|i| simd.splat_u32x8(input[i]));
            let blocks: [u64; LANES] = core::array::from_fn(|lane| block.wrapping_add(lane as u64));
            x[8] = cast(blocks.map(|b| b as u32));
            x[9] = cast(blocks.map(|b| (b >> 32) as u32));
            let start = x;
            for _ in 0..10 {
                // Column round, then row round.
                quarter(simd, &mut x, 0, 4, 8, 12);
                quarter(simd, &mut x, 5, 9, 13, 1);
                quarter(simd, &mut x, 10, 14, 2, 6);
                quarter(simd, &mut x, 15, 3, 7, 11);
                quarter(simd, &mut x, 0, 1, 2, 3);
                quarter(simd, &mut x, 5, 6, 7, 4);
                quarter(simd, &mut x, 10, 11, 8, 9);
                quarter(simd, &mut x, 15, 12, 13, 14);
            }
            let rows: [__m256i; 16] = core::array::from_fn(|i| cast(simd.wrapping_add_u32x8(x[i], start[i])));
            // Row `i` holds word `i` of the eight blocks; block `c` is column `c`. Two 8×8
            // transposes in registers (words 0..8, then 8..16), each stored as eight 32-byte
            // halves of blocks, instead of 128 stores of one word each.
            let f = simd.avx2;
            for (half, rows) in rows.chunks_exact(8).enumerate() {
                let t: [__m256i; 8] = core::array::from_fn(|i| {
                    let (a, b) = (rows[i & !1], rows[i | 1]);
                    if i % 2 == 0 { f._mm256_unpacklo_epi32(a, b) } else { f._mm256_unpackhi_epi32(a, b) }
                });
                // u[4g + j], 128-bit lane k: words 4g..4g+4 (of this half) of block 4k + j.
                let u: [__m256i; 8] = core::array::from_fn(|n| {
                    let (g, j) = (n / 4, n % 4);
                    let (a, b) = (t[4 * g + j / 2], t[4 * g + 2 + j / 2]);
                    if j % 2 == 0 { f._mm256_unpacklo_epi64(a, b) } else { f._mm256_unpackhi_epi64(a, b) }
                });
                for j in 0..4 {
                    let blocks = [
                        f._mm256_permute2x128_si256::<0x20>(u[j], u[4 + j]),
                        f._mm256_permute2x128_si256::<0x31>(u[j], u[4 + j]),
                    ];
                    for (k, block) in blocks.into_iter().enumerate() {
                        let at = 64 * (4 * k + j) + 32 * half;
                        let bytes: [u8; 32] = cast(block); // x86 is little-endian, as Salsa20's output
                        out[at..at + 32].copy_from_slice(&bytes);
                    }
                }
            }
        }
    }

    /// Salsa20's quarter round on words `a, b, c, d`, in every lane.
    #[inline(always)]
    fn quarter(simd: V3, x: &mut [u32x8; 16], a: usize, b: usize, c: usize, d: usize) {
        x[b] = simd.xor_u32x8(x[b], rotl::<7, 25>(simd, simd.wrapping_add_u32x8(x[a], x[d])));
        x[c] = simd.xor_u32x8(x[c], rotl::<9, 23>(simd, simd.wrapping_add_u32x8(x[b], x[a])));
        x[d] = simd.xor_u32x8(x[d], rotl::<13, 19>(simd, simd.wrapping_add_u32x8(x[c], x[b])));
        x[a] = simd.xor_u32x8(x[a], rotl::<18, 14>(simd, simd.wrapping_add_u32x8(x[d], x[c])));
    }

    /// Rotation left by `L` (`R` = 32 - `L`: const generics cannot compute it).
    #[inline(always)]
    fn rotl<const L: i32, const R: i32>(simd: V3, v: u32x8) -> u32x8 {
        simd.or_u32x8(simd.shl_const_u32x8::<L>(v), simd.shr_const_u32x8::<R>(v))
    }
}

/// Sixteen blocks side by side in AVX-512's 512-bit vectors, where the CPU has AVX-512 (F, VL,
/// BW, DQ, CD: `pulp`'s V4). Beside twice the lanes, AVX-512 rotates a vector in one instruction
/// (`vprold`) where AVX2 takes a shift, a shift and an or: Salsa20's rounds are adds, xors and
/// rotations, so a block costs about a third of the vector operations.
#[cfg(all(target_arch = "x86_64", not(target_feature = "avx2"), not(zmtp_portable_salsa)))]
mod avx512 {
    use core::arch::x86_64::__m512i;
    use pulp::bytemuck::cast;
    use pulp::u32x16;
    use pulp::x86::V4;

    /// Blocks per pass.
    pub(super) const LANES: usize = 16;
    /// Bytes of keystream per pass.
    pub(super) const PASS: usize = 64 * LANES;
    /// Proof that the CPU has AVX-512.
    pub(super) type Token = V4;

    /// The CPU's AVX-512, checked once per process.
    pub(super) fn detect() -> Option<V4> {
        V4::try_new()
    }

    /// The pass starting at `block` into `out`, with AVX-512 enabled for its code.
    pub(super) fn next_pass(simd: V4, input: &[u32; 16], block: u64, out: &mut [u8; PASS]) {
        simd.vectorize(Pass { simd, input, block, out });
    }

    /// A pass as `vectorize` takes it: its body must inline into the AVX-512-enabled frame.
    struct Pass<'a> {
        simd: V4,
        input: &'a [u32; 16],
        block: u64,
        out: &'a mut [u8; PASS],
    }

    impl pulp::NullaryFnOnce for Pass<'_> {
        type Output = ();

        #[inline(always)]
        fn call(self) {
            let Pass { simd, input, block, out } = self;
            let mut x: [u32x16; 16] = core::array::from_fn(|i| simd.splat_u32x16(input[i]));
            let blocks: [u64; LANES] = core::array::from_fn(|lane| block.wrapping_add(lane as u64));
            x[8] = cast(blocks.map(|b| b as u32));
            x[9] = cast(blocks.map(|b| (b >> 32) as u32));
            let start = x;
            for _ in 0..10 {
                // Column round, then row round.
                quarter(simd, &mut x, 0, 4, 8, 12);
                quarter(simd, &mut x, 5, 9, 13, 1);
                quarter(simd, &mut x, 10, 14, 2, 6);
                quarter(simd, &mut x, 15, 3, 7, 11);
                quarter(simd, &mut x, 0, 1, 2, 3);
                quarter(simd, &mut x, 5, 6, 7, 4);
                quarter(simd, &mut x, 10, 11, 8, 9);
                quarter(simd, &mut x, 15, 12, 13, 14);
            }
            let rows: [__m512i; 16] = core::array::from_fn(|i| cast(simd.wrapping_add_u32x16(x[i], start[i])));
            // Row `i` holds word `i` of the sixteen blocks; block `c` is column `c`. A 16×16
            // transpose in registers (64 shuffles), then one 64-byte store per block, instead of
            // 256 stores of one word each.
            let f = simd.avx512f;
            let t: [__m512i; 16] = core::array::from_fn(|i| {
                let (a, b) = (rows[i & !1], rows[i | 1]);
                if i % 2 == 0 { f._mm512_unpacklo_epi32(a, b) } else { f._mm512_unpackhi_epi32(a, b) }
            });
            // u[4g + j], 128-bit lane k: words 4g..4g+4 of block 4k + j.
            let u: [__m512i; 16] = core::array::from_fn(|n| {
                let (g, j) = (n / 4, n % 4);
                let (a, b) = (t[4 * g + j / 2], t[4 * g + 2 + j / 2]);
                if j % 2 == 0 { f._mm512_unpacklo_epi64(a, b) } else { f._mm512_unpackhi_epi64(a, b) }
            });
            for j in 0..4 {
                let (a, b, c, d) = (u[j], u[4 + j], u[8 + j], u[12 + j]);
                let low_ab = f._mm512_shuffle_i32x4::<0x44>(a, b);
                let high_ab = f._mm512_shuffle_i32x4::<0xEE>(a, b);
                let low_cd = f._mm512_shuffle_i32x4::<0x44>(c, d);
                let high_cd = f._mm512_shuffle_i32x4::<0xEE>(c, d);
                let blocks = [
                    f._mm512_shuffle_i32x4::<0x88>(low_ab, low_cd),
                    f._mm512_shuffle_i32x4::<0xDD>(low_ab, low_cd),
                    f._mm512_shuffle_i32x4::<0x88>(high_ab, high_cd),
                    f._mm512_shuffle_i32x4::<0xDD>(high_ab, high_cd),
                ];
                for (k, block) in blocks.into_iter().enumerate() {
                    let at = 64 * (4 * k + j);
                    let bytes: [u8; 64] = cast(block); // x86 is little-endian, as Salsa20's output
                    out[at..at + 64].copy_from_slice(&bytes);
                }
            }
        }
    }

    /// Salsa20's quarter round on words `a, b, c, d`, in every lane.
    #[inline(always)]
    fn quarter(simd: V4, x: &mut [u32x16; 16], a: usize, b: usize, c: usize, d: usize) {
        x[b] = simd.xor_u32x16(x[b], rotl::<7>(simd, simd.wrapping_add_u32x16(x[a], x[d])));
        x[c] = simd.xor_u32x16(x[c], rotl::<9>(simd, simd.wrapping_add_u32x16(x[b], x[a])));
        x[d] = simd.xor_u32x16(x[d], rotl::<13>(simd, simd.wrapping_add_u32x16(x[c], x[b])));
        x[a] = simd.xor_u32x16(x[a], rotl::<18>(simd, simd.wrapping_add_u32x16(x[d], x[c])));
    }

    /// Rotation left by `L`: one `vprold`.
    #[inline(always)]
    fn rotl<const L: i32>(simd: V4, v: u32x16) -> u32x16 {
        cast(simd.avx512f._mm512_rol_epi32::<L>(cast(v)))
    }
}

/// Builds without the run-time choice (other architectures, AVX2 targeted at build time, or
/// `--cfg zmtp_portable_salsa`): no token can exist, so the wide passes are never taken.
#[cfg(not(all(target_arch = "x86_64", not(target_feature = "avx2"), not(zmtp_portable_salsa))))]
mod avx2 {
    pub(super) const LANES: usize = super::LANES;
    pub(super) const PASS: usize = super::PASS;
    pub(super) type Token = core::convert::Infallible;

    pub(super) fn detect() -> Option<Token> {
        None
    }

    pub(super) fn next_pass(token: Token, _input: &[u32; 16], _block: u64, _out: &mut [u8; PASS]) {
        match token {}
    }
}

#[cfg(not(all(target_arch = "x86_64", not(target_feature = "avx2"), not(zmtp_portable_salsa))))]
use avx2 as avx512;

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, RngCore, SeedableRng};
    use salsa20::XSalsa20;
    use salsa20::cipher::generic_array::GenericArray;
    use salsa20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};

    /// The same stream as RustCrypto's XSalsa20, the MAC key first, at every length around the
    /// pass boundaries and applied in pieces of any size; with a length hint that takes the
    /// portable lanes, the true one, and one that takes the widest pass the CPU has.
    #[test]
    fn matches_xsalsa20_in_any_pieces() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let lengths = (0..600).chain([1000, 4096, 65536, 100_003]);
        for (len, hint) in lengths.flat_map(|len| [(len, 0), (len, len), (len, 1 << 20)]) {
            let (mut key, mut nonce) = ([0u8; 32], [0u8; 24]);
            rng.fill_bytes(&mut key);
            rng.fill_bytes(&mut nonce);
            let mut data = vec![0u8; len];
            rng.fill_bytes(&mut data);

            let mut reference = XSalsa20::new(GenericArray::from_slice(&key), GenericArray::from_slice(&nonce));
            let mut expected_mac = [0u8; 32];
            reference.apply_keystream(&mut expected_mac);
            let mut expected = data.clone();
            reference.apply_keystream(&mut expected);

            for wide in every_wide() {
                let (mut ours, mac) = XSalsaBox::with_wide(&key, &nonce, hint, wide);
                assert_eq!(*mac, expected_mac);
                let mut got = data.clone();
                let mut rest = &mut got[..];
                while !rest.is_empty() {
                    let n = rng.gen_range(1..=rest.len().min(700));
                    let (now, later) = rest.split_at_mut(n);
                    ours.apply(now);
                    rest = later;
                }
                assert_eq!(got, expected, "length {len}, hint {hint}, pass of {} bytes", ours.pass_len);
            }
        }
    }

    /// The 64-bit block counter carries into its high word as the reference's does.
    #[test]
    fn the_block_counter_carries() {
        let (key, nonce) = ([9u8; 32], [4u8; 8]);
        let mut lanes = SalsaLanes::new(&key, &nonce);
        lanes.block = u32::MAX as u64 - 1; // the pass spans the carry
        let mut pass = [0u8; PASS];
        lanes.next_pass(&mut pass);
        let mut reference = salsa20::Salsa20::new(GenericArray::from_slice(&key), GenericArray::from_slice(&nonce));
        reference.seek((u32::MAX as u64 - 1) * 64);
        let mut expected = [0u8; PASS];
        reference.apply_keystream(&mut expected);
        assert_eq!(pass, expected);
    }

    /// Every pass this CPU and build can take: the portable lanes, AVX2, AVX-512.
    fn every_wide() -> Vec<Wide> {
        let mut wides = vec![Wide::Portable];
        wides.extend(avx2::detect().map(Wide::Avx2));
        wides.extend(avx512::detect().map(Wide::Avx512));
        wides
    }

    /// Prints what 64 KiB of XSalsa20 costs in each pass this CPU has (not an assertion):
    /// `cargo test --release -p zmtp-wire --lib pass_timing -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn print_pass_timing() {
        let (key, nonce, mut buf, n) = ([7u8; 32], [3u8; 24], vec![0u8; 65536], 2000u32);
        for wide in every_wide() {
            let t = std::time::Instant::now();
            for _ in 0..n {
                XSalsaBox::with_wide(&key, &nonce, buf.len(), wide).0.apply(&mut buf);
            }
            let name = match wide {
                Wide::Portable => "portable",
                Wide::Avx2(_) => "avx2",
                Wide::Avx512(_) => "avx512",
            };
            println!("xsalsa20 64 KiB, {name}: {:?}", t.elapsed() / n);
        }
    }

    /// Each wide pass this CPU has also carries, and equals the reference.
    #[test]
    fn every_wide_pass_matches_across_the_carry() {
        for wide in every_wide() {
            let (key, nonce) = ([9u8; 32], [4u8; 8]);
            let mut lanes = SalsaLanes::new(&key, &nonce);
            lanes.wide = wide;
            lanes.block = u32::MAX as u64 - 3; // a pass of any width across the carry
            let mut pass = [0u8; PASS_BUF];
            let len = lanes.next_pass_any(&mut pass);
            let mut reference = salsa20::Salsa20::new(GenericArray::from_slice(&key), GenericArray::from_slice(&nonce));
            reference.seek((u32::MAX as u64 - 3) * 64);
            let mut expected = [0u8; PASS_BUF];
            reference.apply_keystream(&mut expected[..len]);
            assert_eq!(pass[..len], expected[..len], "pass of {len} bytes");
        }
    }
}
