//! Reading size-prefixed frames off a connection.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::CodecError;

/// The buffer grows by at most this much per read, so a peer that announces
/// a large frame and sends nothing holds little memory.
const READ_CHUNK: usize = 64 * 1024;

/// Reads one frame: a big-endian `i32` length, then that many bytes.
///
/// Returns `Ok(None)` on a clean end of stream before the length, and
/// [`CodecError::FrameTooLarge`] if the length is negative or larger than
/// `max` (before reading the body). An end of stream anywhere inside the
/// frame is [`CodecError::Io`] (`UnexpectedEof`). The body buffer grows as
/// bytes arrive rather than being reserved from the announced length: the
/// caller has no memory budget the length was charged to.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<Bytes>, CodecError> {
    match read_frame_len(r, max).await? {
        None => Ok(None),
        Some(len) => Ok(Some(read_body(r, len, READ_CHUNK).await?.freeze())),
    }
}

/// Reads a frame's length prefix (the first half of [`read_frame`]), so
/// that a caller can wait for room before reading the body.
pub async fn read_frame_len<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<usize>, CodecError> {
    let mut prefix = [0u8; 4];
    let mut filled = 0;
    while filled < prefix.len() {
        let n = r.read(&mut prefix[filled..]).await?;
        if n == 0 {
            if filled == 0 {
                return Ok(None);
            }
            return Err(eof("inside a frame length"));
        }
        filled += n;
    }
    frame_len(prefix, max).map(Some)
}

/// The length a frame's 4-byte prefix announces, if it is within `max`.
pub fn frame_len(prefix: [u8; 4], max: usize) -> Result<usize, CodecError> {
    let announced = i32::from_be_bytes(prefix);
    match usize::try_from(announced) {
        Ok(len) if len <= max => Ok(len),
        _ => Err(CodecError::FrameTooLarge {
            len: i64::from(announced),
            max,
        }),
    }
}

/// The error for a connection that ended inside a frame length.
pub fn eof_in_length() -> CodecError {
    eof("inside a frame length")
}

/// Reads a frame body of `len` bytes (the second half of [`read_frame`])
/// for a caller that has charged `len` to its memory budget already: the
/// buffer is allocated at its full size at once, so that the bytes land
/// where they stay (growing it as they arrive copied a large produce about
/// once more on its way in).
pub async fn read_frame_body<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
) -> Result<Bytes, CodecError> {
    Ok(read_body(r, len, len).await?.freeze())
}

/// Reads `len` bytes, reserving at most `step` more at a time.
async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
    step: usize,
) -> Result<BytesMut, CodecError> {
    let mut body = BytesMut::new();
    let mut limited = r.take(len as u64);
    while body.len() < len {
        body.reserve((len - body.len()).min(step.max(1)));
        if limited.read_buf(&mut body).await? == 0 {
            return Err(eof("inside a frame body"));
        }
    }
    Ok(body)
}

fn eof(where_: &str) -> CodecError {
    CodecError::Io(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("connection closed {where_}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body that arrives in small pieces.
    fn trickle(len: usize) -> tokio::io::DuplexStream {
        use tokio::io::AsyncWriteExt;
        let (mut tx, rx) = tokio::io::duplex(7_001);
        tokio::spawn(async move {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let _ = tx.write_all(&data).await;
        });
        rx
    }

    #[tokio::test]
    async fn a_charged_body_is_allocated_once_at_its_size() {
        let len = 1_000_000;
        let body = read_body(&mut trickle(len), len, len).await.unwrap();
        assert_eq!(body.len(), len);
        assert_eq!(body.capacity(), len, "allocated once, never grown");
        assert!(body.iter().enumerate().all(|(i, b)| *b == i as u8));
        // Without a charge the buffer grows with what arrives.
        let grown = read_body(&mut trickle(len), len, READ_CHUNK).await.unwrap();
        assert_eq!(&grown[..], &body[..]);
        assert_ne!(grown.capacity(), len);
    }
}
