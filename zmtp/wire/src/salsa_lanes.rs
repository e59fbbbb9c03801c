//! XSalsa20's keystream four (or eight) blocks at a time, for CURVE's message box (`curve_message.rs`).
//!
//! RustCrypto's `salsa20` 0.10 computes one 64-byte block at a time in scalar code: 124 µs for a
//! 64 KiB message here, six times the Poly1305 beside it, and the whole of why CURVE at 64 KiB ran at
//! half libzmq's speed (libsodium's Salsa20 is vectorized). This computes four consecutive blocks
//! (eight with AVX2, see [`LANES`]) side by side, each state word a vector of four lanes (`wide::u32x4`: SSE2 on any x86-64, NEON on
//! aarch64, plain arrays where there is neither), so that every step of a round is one vector
//! operation on four independent values. Arrays of four `u32` were not enough: the compiler kept
//! them scalar (no vector rotate on SSE2), 100–110 µs per 64 KiB; the vectors take it to ~42 µs.
//! The tests hold it to the `salsa20` crate byte for byte.

use zeroize::Zeroizing;

/// Blocks computed side by side: eight where the build targets AVX2 (`-C target-cpu=native` on
/// most x86-64 machines of the last decade, or `x86-64-v3`), where a 64 KiB keystream takes
/// 22–28 µs instead of 42; four elsewhere (eight in two SSE2 halves measured slower, 60 µs).
#[cfg(target_feature = "avx2")]
const LANES: usize = 8;
#[cfg(not(target_feature = "avx2"))]
const LANES: usize = 4;
/// Bytes of keystream per pass.
pub(crate) const PASS: usize = 64 * LANES;

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
        SalsaLanes { input, block: 0 }
    }

    /// The next [`PASS`] bytes of keystream into `out`.
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
    /// Keystream of the current pass, and how much of it is used.
    pass: Zeroizing<[u8; PASS]>,
    used: usize,
}

impl XSalsaBox {
    /// The stream for `nonce` under the session key `key`, and its MAC key.
    pub(crate) fn new(key: &[u8; 32], nonce: &[u8; 24]) -> (XSalsaBox, Zeroizing<[u8; 32]>) {
        use salsa20::cipher::consts::U10;
        use salsa20::cipher::generic_array::GenericArray;
        let subkey: Zeroizing<[u8; 32]> = Zeroizing::new(
            salsa20::hsalsa::<U10>(GenericArray::from_slice(key), GenericArray::from_slice(&nonce[..16])).into(),
        );
        let mut lanes = SalsaLanes::new(&subkey, nonce[16..].try_into().expect("8 bytes"));
        let mut pass = Zeroizing::new([0u8; PASS]);
        lanes.next_pass(&mut pass);
        let mut mac_key = Zeroizing::new([0u8; 32]);
        mac_key.copy_from_slice(&pass[..32]);
        (XSalsaBox { lanes, pass, used: 32 }, mac_key)
    }

    /// XORs `buf` with the stream's next bytes.
    pub(crate) fn apply(&mut self, mut buf: &mut [u8]) {
        while !buf.is_empty() {
            if self.used == PASS {
                if buf.len() >= PASS {
                    // Whole passes straight into the message.
                    let (whole, rest) = buf.split_at_mut(buf.len() / PASS * PASS);
                    for chunk in whole.chunks_exact_mut(PASS) {
                        self.lanes.next_pass(&mut self.pass);
                        xor_into(chunk, &self.pass[..]);
                    }
                    buf = rest;
                    continue;
                }
                self.lanes.next_pass(&mut self.pass);
                self.used = 0;
            }
            let n = buf.len().min(PASS - self.used);
            let (now, rest) = buf.split_at_mut(n);
            xor_into(now, &self.pass[self.used..self.used + n]);
            self.used += n;
            buf = rest;
        }
    }
}

fn xor_into(buf: &mut [u8], keystream: &[u8]) {
    for (b, k) in buf.iter_mut().zip(keystream) {
        *b ^= k;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, RngCore, SeedableRng};
    use salsa20::XSalsa20;
    use salsa20::cipher::generic_array::GenericArray;
    use salsa20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};

    /// The same stream as RustCrypto's XSalsa20, the MAC key first, at every length around the
    /// pass boundaries and applied in pieces of any size.
    #[test]
    fn matches_xsalsa20_in_any_pieces() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for len in (0..600).chain([1000, 4096, 65536, 100_003]) {
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

            let (mut ours, mac) = XSalsaBox::new(&key, &nonce);
            assert_eq!(*mac, expected_mac);
            let mut got = data.clone();
            let mut rest = &mut got[..];
            while !rest.is_empty() {
                let n = rng.gen_range(1..=rest.len().min(700));
                let (now, later) = rest.split_at_mut(n);
                ours.apply(now);
                rest = later;
            }
            assert_eq!(got, expected, "length {len}");
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
}
