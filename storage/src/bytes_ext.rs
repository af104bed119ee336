//! Bounds-checked big-endian reads from byte slices. Every read returns
//! `None` instead of panicking when the slice is too short.

pub(crate) fn be_u16(buf: &[u8], at: usize) -> Option<u16> {
    let b = buf.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

pub(crate) fn be_i16(buf: &[u8], at: usize) -> Option<i16> {
    be_u16(buf, at).map(|v| v as i16)
}

pub(crate) fn be_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

pub(crate) fn be_i32(buf: &[u8], at: usize) -> Option<i32> {
    be_u32(buf, at).map(|v| v as i32)
}

pub(crate) fn be_u64(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_be_bytes(a))
}

pub(crate) fn be_i64(buf: &[u8], at: usize) -> Option<i64> {
    be_u64(buf, at).map(|v| v as i64)
}
