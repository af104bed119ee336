//! CRC-32C of two byte strings put together, from their own CRCs and the
//! second one's length: [`combine`].
//!
//! `crc32c::crc32c_combine` builds the operator for "append `n` zero bytes"
//! by squaring 32×32 bit matrices, about 20 of them for a batch of 64 KiB,
//! on every call. A produce calls it two or three times per batch (a
//! batch's whole CRC from its checked one, then the WAL entry's data CRC),
//! and it was a tenth of the broker's samples in a produce
//! (`docs/benchmarks.md`). Here the powers x^(2^k) modulo the polynomial
//! are a table built at compile time, so a combine is one multiplication
//! modulo the polynomial per set bit of the length.
//!
//! Polynomials are in the CRC's reflected bit order: bit 31 is the
//! coefficient of x^0, bit 0 that of x^31.

/// CRC-32C's polynomial (Castagnoli) without its x^32 term, reflected.
const POLY: u32 = 0x82F6_3B78;
/// The polynomial `1` (x^0).
const ONE: u32 = 1 << 31;

/// `v · x mod P`.
const fn times_x(v: u32) -> u32 {
    if v & 1 == 1 { (v >> 1) ^ POLY } else { v >> 1 }
}

/// `a · b mod P`.
const fn mul(a: u32, b: u32) -> u32 {
    let mut product = 0u32;
    let mut shifted = b; // b · x^i
    let mut i = 0;
    while i < 32 {
        if a & (ONE >> i) != 0 {
            product ^= shifted;
        }
        shifted = times_x(shifted);
        i += 1;
    }
    product
}

/// `X_POW_2K[k]` = x^(2^k) mod P.
const X_POW_2K: [u32; 64] = {
    let mut t = [0u32; 64];
    t[0] = ONE >> 1; // x^1
    let mut k = 1;
    while k < 64 {
        t[k] = mul(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// x^(8·n) mod P: the operator that appends `n` zero bytes to a CRC.
fn x_pow_bytes(n: u64) -> u32 {
    let mut p = ONE;
    let mut rest = n;
    let mut k = 3; // 8·n = n · 2^3
    while rest != 0 && k < 64 {
        if rest & 1 == 1 {
            p = mul(p, X_POW_2K[k]);
        }
        rest >>= 1;
        k += 1;
    }
    p
}

/// The CRC-32C of `A` followed by `B`, given `crc_a` = CRC-32C(A),
/// `crc_b` = CRC-32C(B) and `len_b` = B's length in bytes.
pub fn combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    if len_b == 0 {
        return crc_a;
    }
    mul(x_pow_bytes(len_b as u64), crc_a) ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    #[test]
    fn combine_is_the_crc_of_the_concatenation() {
        let lens = [
            0usize,
            1,
            2,
            3,
            7,
            8,
            9,
            21,
            61,
            255,
            256,
            4095,
            4096,
            65_536,
            65_537,
            1 << 20,
        ];
        for (i, &la) in lens.iter().enumerate() {
            for (j, &lb) in lens.iter().enumerate() {
                let a = bytes(la, i as u32);
                let b = bytes(lb, 100 + j as u32);
                let whole = [a.as_slice(), b.as_slice()].concat();
                assert_eq!(
                    combine(crc32c::crc32c(&a), crc32c::crc32c(&b), lb),
                    crc32c::crc32c(&whole),
                    "{la} + {lb} bytes"
                );
            }
        }
    }

    #[test]
    fn combine_agrees_with_the_crates_for_large_lengths() {
        for len in [1usize << 30, (1 << 33) + 12_345, usize::MAX >> 3] {
            let (a, b) = (0xDEAD_BEEF, 0x1234_5678);
            assert_eq!(
                combine(a, b, len),
                crc32c::crc32c_combine(a, b, len),
                "{len}"
            );
        }
    }

    #[test]
    fn multiplication_by_one_and_by_x() {
        assert_eq!(mul(ONE, 0x1234_5678), 0x1234_5678);
        assert_eq!(mul(ONE >> 1, 0x1234_5678), times_x(0x1234_5678));
        assert_eq!(x_pow_bytes(0), ONE);
    }
}
