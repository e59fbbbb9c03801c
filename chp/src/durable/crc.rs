//! CRC-32 (IEEE 802.3, as zlib and `crc32fast` compute it) of the journal's records and files.
//!
//! The full build uses `crc32fast` (SIMD, several GB/s). The size-limited build (chp's `small`
//! feature) uses a 1 KiB table a byte at a time instead: `crc32fast`'s tables and SIMD paths are
//! about 19 KB of a binary held under 1.5 MiB, and the small build trades speed for size
//! throughout. Both compute the same function (tested against each other).

/// The checksum of `bytes`.
#[cfg(not(feature = "small"))]
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

#[cfg(feature = "small")]
pub(crate) use self::compact_crc32 as crc32;

/// The checksum of `bytes`, one byte at a time through a 256-entry table.
#[cfg(any(feature = "small", test))]
pub(crate) fn compact_crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = table();
    let mut crc = !0u32;
    for &b in bytes {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The reflected polynomial's table, built at compile time.
#[cfg(any(feature = "small", test))]
const fn table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_compact_crc_is_crc32fasts() {
        assert_eq!(super::compact_crc32(b"123456789"), 0xCBF4_3926, "the standard check value");
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in [0, 1, 7, 8, 15, 16, 63, 64, 100, 1023, 4999] {
            assert_eq!(super::compact_crc32(&bytes[..len]), crc32fast::hash(&bytes[..len]), "{len} bytes");
        }
    }
}
