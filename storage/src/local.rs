//! A local folder as an object store: `object_store`'s `LocalFileSystem`,
//! with range reads that skip its zero-filling and, optionally, puts and
//! reads that bypass the page cache (`O_DIRECT`).
//!
//! A plain range read of at least [`DIRECT_MIN_BYTES`] (a catch-up reader's
//! block) is read here into a buffer that is not zeroed first:
//! `LocalFileSystem` zero-fills each buffer before reading into it, which
//! was a tenth of the broker's samples in a catch-up read (`memset` and the
//! page faults it takes; `docs/benchmarks.md`).
//!
//! With direct I/O on (`--store-direct-io`): a WAL or segment object is
//! written once and read back a few times at most: by the segment
//! compaction, by a catch-up reader. What the broker reads again it keeps
//! itself (the partition tail, the block cache), so copying every written
//! byte into the kernel's page cache as well is work with little use. On a
//! virtual machine it is the most expensive step of a produce: a page the
//! guest has freed is backed again by the host on its next use, and a
//! buffered write of 1 GiB touches 262,144 of them (measured in
//! `docs/benchmarks.md`).
//!
//! So then a put of at least [`DIRECT_MIN_BYTES`] is copied into a reused,
//! 4 KiB-aligned buffer and written with `O_DIRECT` in 1 MiB steps; the file
//! is cut to its length, synced, and published as `object_store`'s own
//! local store does it (a staging file `NAME#N` renamed, or hard-linked for
//! [`PutMode::Create`], and the folder synced), so that the published file
//! is whole and durable when the put returns. A plain range read of at
//! least [`DIRECT_MIN_BYTES`] reads whole aligned blocks with `O_DIRECT`
//! straight into the buffer it hands out (a slice of it: no copy), taken
//! from the buffers earlier readers let go of when one is idle (a buffered
//! read of data that is not in the page cache costs as much as a buffered
//! write).
//! Everything else (small puts and reads, conditional reads, listing,
//! deletes) goes to `object_store`'s `LocalFileSystem`, which also skips the
//! staging files when it lists. A filesystem that refuses `O_DIRECT` (tmpfs
//! before Linux 6.6, some network filesystems) is noticed at the first
//! large put or read, logged once, and used through the page cache from
//! then on.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    PutResult,
};

/// Puts smaller than this go through the page cache: padding them to
/// whole blocks and waiting for the device costs more than it saves.
pub const DIRECT_MIN_BYTES: usize = 64 * 1024;

/// The alignment `O_DIRECT` asks of buffers, offsets and lengths here.
const BLOCK: usize = 4096;

/// Blocks written per system call (1 MiB, well under `IOV_MAX`).
const STEP_BLOCKS: usize = 256;

/// Idle step buffers kept for reuse (each `STEP_BLOCKS * BLOCK` bytes).
const POOLED_BUFFERS: usize = 4;

/// One aligned block of a step buffer.
#[repr(C, align(4096))]
struct Block([u8; BLOCK]);

type StepBuf = Vec<Block>;

/// The local store. Built by [`LocalStore::new`].
pub struct LocalStore {
    inner: LocalFileSystem,
    /// Direct I/O asked for, and cleared once the filesystem has refused
    /// `O_DIRECT`.
    direct: AtomicBool,
    buffers: Arc<Buffers>,
    read_buffers: Arc<ReadBuffers>,
}

/// Step buffers kept between puts, so that a put reuses memory the process
/// has touched already.
#[derive(Default)]
struct Buffers(Mutex<Vec<StepBuf>>);

impl Buffers {
    fn take(&self) -> StepBuf {
        let pooled = self.0.lock().ok().and_then(|mut b| b.pop());
        pooled.unwrap_or_else(|| (0..STEP_BLOCKS).map(|_| Block([0; BLOCK])).collect())
    }

    fn give_back(&self, buf: StepBuf) {
        if let Ok(mut b) = self.0.lock()
            && b.len() < POOLED_BUFFERS
        {
            b.push(buf);
        }
    }
}

/// Idle read buffers kept for reuse (a catch-up read's are 1 MiB blocks,
/// so about 32 MiB at most).
const POOLED_READ_BUFFERS: usize = 32;

/// Buffers of direct reads that their readers let go of (a block the cache
/// evicted, a fetch's answer sent), kept for the next direct read: a reused
/// buffer needs no zeroing and no new pages, which on a catch-up read cost
/// the broker about a fifth of its CPU (`docs/benchmarks.md`).
#[derive(Default)]
struct ReadBuffers(Mutex<Vec<Vec<u8>>>);

impl ReadBuffers {
    /// A buffer of at least `len` bytes (and less than twice that), reused
    /// if one is idle.
    fn take(&self, len: usize) -> Vec<u8> {
        let reused = self.0.lock().ok().and_then(|mut idle| {
            let i = idle
                .iter()
                .rposition(|b| b.len() >= len && b.len() / 2 < len)?;
            Some(idle.swap_remove(i))
        });
        reused.unwrap_or_else(|| vec![0u8; len])
    }

    fn give_back(&self, buf: Vec<u8>) {
        if let Ok(mut idle) = self.0.lock()
            && idle.len() < POOLED_READ_BUFFERS
        {
            idle.push(buf);
        }
    }

    #[cfg(test)]
    fn idle(&self) -> usize {
        self.0.lock().map(|b| b.len()).unwrap_or(0)
    }
}

/// A read buffer lent out as `Bytes`: back to its pool once the last slice
/// of it is dropped.
struct Lent {
    buf: Vec<u8>,
    home: std::sync::Weak<ReadBuffers>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            home.give_back(std::mem::take(&mut self.buf));
        }
    }
}

impl fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalStore({})", self.inner)
    }
}

impl fmt::Display for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalStore({})", self.inner)
    }
}

/// Why a direct put or read did not happen.
enum DirectError {
    /// The filesystem does not do `O_DIRECT`: use the page cache.
    Unsupported,
    /// Not a case this module answers (a missing file, a range past the
    /// end): `LocalFileSystem` gives its usual answer.
    Delegate,
    /// The put or read failed.
    Failed(object_store::Error),
}

impl LocalStore {
    /// `inner` must have been built with fsync on: the puts that go to it
    /// (small ones, and all of them after the filesystem refused
    /// `O_DIRECT`) are durable only then.
    pub fn new(inner: LocalFileSystem, direct_io: bool) -> Self {
        Self {
            inner,
            direct: AtomicBool::new(direct_io),
            buffers: Arc::default(),
            read_buffers: Arc::default(),
        }
    }

    /// Whether puts and reads still go around the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.load(Ordering::Relaxed)
    }

    /// Notes that the filesystem refused `O_DIRECT` (logged once).
    fn refused(&self) {
        if self.direct.swap(false, Ordering::Relaxed) {
            tracing::info!(
                store = %self.inner,
                "the filesystem refuses O_DIRECT; using the page cache"
            );
        }
    }
}

/// The range of a read this module answers itself: a plain bounded range
/// of at least [`DIRECT_MIN_BYTES`], with no condition.
fn own_range(o: &GetOptions) -> Option<std::ops::Range<u64>> {
    let plain = o.if_match.is_none()
        && o.if_none_match.is_none()
        && o.if_modified_since.is_none()
        && o.if_unmodified_since.is_none()
        && o.version.is_none()
        && !o.head;
    match &o.range {
        Some(GetRange::Bounded(r))
            if plain && r.end.saturating_sub(r.start) >= DIRECT_MIN_BYTES as u64 =>
        {
            Some(r.clone())
        }
        _ => None,
    }
}

/// Opens `path` for a read of `range` (with `flags`, e.g. `O_DIRECT`):
/// the file, its metadata and the range's length. A range that does not
/// lie inside the file, or a file that cannot be opened, is delegated;
/// `O_DIRECT` refused is [`DirectError::Unsupported`].
fn open_range(
    path: &FsPath,
    range: &std::ops::Range<u64>,
    flags: i32,
) -> Result<(File, std::fs::Metadata, usize), DirectError> {
    let file = match OpenOptions::new().read(true).custom_flags(flags).open(path) {
        Ok(f) => f,
        Err(e) if flags != 0 && e.raw_os_error() == Some(libc::EINVAL) => {
            return Err(DirectError::Unsupported);
        }
        Err(_) => return Err(DirectError::Delegate),
    };
    let meta = file
        .metadata()
        .map_err(|e| DirectError::Failed(io_error(path, e)))?;
    if range.start >= range.end || range.end > meta.len() {
        return Err(DirectError::Delegate);
    }
    let want = usize::try_from(range.end - range.start).map_err(|_| DirectError::Delegate)?;
    Ok((file, meta, want))
}

/// A range read around the page cache, on a blocking thread: the aligned
/// blocks that hold `range` are read straight into one buffer (from
/// `pool`, given back when the last slice of it goes), at an aligned
/// address inside it (it is a block larger), and the range is handed out as
/// a slice of it (no copy). A range that does not lie inside the file is
/// delegated.
fn read_direct(
    path: &FsPath,
    range: std::ops::Range<u64>,
    pool: &Arc<ReadBuffers>,
) -> Result<(Bytes, std::fs::Metadata), DirectError> {
    let (file, meta, want) = open_range(path, &range, libc::O_DIRECT)?;
    let block = BLOCK as u64;
    let start = range.start / block * block;
    let span = usize::try_from(range.end.div_ceil(block) * block - start)
        .map_err(|_| DirectError::Delegate)?;
    let mut buf = pool.take(span + BLOCK);
    let skew = (BLOCK - buf.as_ptr() as usize % BLOCK) % BLOCK;
    let needed = (range.end - start) as usize;
    let read = read_full_at(&file, &mut buf[skew..skew + span], start).and_then(|got| {
        if got < needed {
            Err(io::ErrorKind::UnexpectedEof.into())
        } else {
            Ok(())
        }
    });
    if let Err(e) = read {
        pool.give_back(buf);
        return Err(DirectError::Failed(io_error(path, e)));
    }
    let from = skew + (range.start - start) as usize;
    let lent = Lent {
        buf,
        home: Arc::downgrade(pool),
    };
    Ok((Bytes::from_owner(lent).slice(from..from + want), meta))
}

/// Reads into `buf` from `at` until it is full or the file ends; returns
/// the bytes read. `O_DIRECT` reads stop short only at the end of the file.
fn read_full_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                if n % BLOCK != 0 {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// A range read through the page cache, on a blocking thread, into a
/// buffer that is not zeroed first. A range that does not lie inside the
/// file is delegated.
fn read_buffered(
    path: &FsPath,
    range: std::ops::Range<u64>,
) -> Result<(Bytes, std::fs::Metadata), DirectError> {
    let (mut file, meta, want) = open_range(path, &range, 0)?;
    let mut out = Vec::with_capacity(want);
    let read = (|| -> io::Result<()> {
        file.seek(SeekFrom::Start(range.start))?;
        // `read_to_end` reads into the spare capacity as it is: no zeroing.
        (&mut file).take(want as u64).read_to_end(&mut out)?;
        if out.len() < want {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    })();
    read.map_err(|e| DirectError::Failed(io_error(path, e)))?;
    Ok((Bytes::from(out), meta))
}

/// A put around the page cache, on a blocking thread.
fn put_direct(
    dest: &FsPath,
    payload: &PutPayload,
    mode: &PutMode,
    buffers: &Buffers,
) -> Result<PutResult, DirectError> {
    let (file, staging) = open_staging(dest)?;
    let mut buf = buffers.take();
    let written = write_all_direct(&file, payload, &mut buf);
    buffers.give_back(buf);
    let published = written
        .and_then(|len| finish(file, len))
        .map_err(|e| io_error(&staging, e))
        .and_then(|()| publish(&staging, dest, mode));
    if published.is_err() {
        let _ = std::fs::remove_file(&staging);
    }
    published.map_err(DirectError::Failed)?;
    let meta = std::fs::metadata(dest).map_err(|e| DirectError::Failed(io_error(dest, e)))?;
    Ok(PutResult {
        e_tag: Some(e_tag(&meta)),
        version: None,
        extensions: Default::default(),
    })
}

/// Opens a new staging file `DEST#N` for direct writes, creating (and
/// syncing) missing parent folders.
fn open_staging(dest: &FsPath) -> Result<(File, PathBuf), DirectError> {
    let mut n = 1u32;
    loop {
        let mut name = dest.as_os_str().to_owned();
        name.push(format!("#{n}"));
        let path = PathBuf::from(name);
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path);
        match opened {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                create_parents(&path).map_err(|e| DirectError::Failed(io_error(&path, e)))?;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // Some filesystems create the file before refusing the flag.
                let _ = std::fs::remove_file(&path);
                return Err(DirectError::Unsupported);
            }
            Err(e) => return Err(DirectError::Failed(io_error(&path, e))),
        }
    }
}

/// Creates the missing folders above `path`, syncing each new folder's
/// parent so that the new entries survive a crash.
fn create_parents(path: &FsPath) -> io::Result<()> {
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    let mut missing = Vec::new();
    let mut at = Some(parent);
    while let Some(dir) = at {
        if dir.exists() {
            break;
        }
        missing.push(dir.to_path_buf());
        at = dir.parent();
    }
    std::fs::create_dir_all(parent)?;
    for dir in missing.iter().rev() {
        if let Some(up) = dir.parent() {
            sync_dir(up)?;
        }
    }
    Ok(())
}

/// Writes the payload in aligned steps; the last step is padded with zeros
/// to a whole block. Returns the payload's length.
fn write_all_direct(file: &File, payload: &PutPayload, buf: &mut StepBuf) -> io::Result<u64> {
    let mut total = 0u64;
    let mut filled = 0usize; // bytes in `buf`
    for chunk in payload.iter() {
        let mut rest: &[u8] = chunk;
        while !rest.is_empty() {
            let (block, at) = (filled / BLOCK, filled % BLOCK);
            let n = rest.len().min(BLOCK - at);
            buf[block].0[at..at + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            filled += n;
            total += n as u64;
            if filled == STEP_BLOCKS * BLOCK {
                write_blocks(file, &buf[..STEP_BLOCKS])?;
                filled = 0;
            }
        }
    }
    if filled > 0 {
        let blocks = filled.div_ceil(BLOCK);
        let (last, at) = (filled / BLOCK, filled % BLOCK);
        if at > 0 {
            buf[last].0[at..].fill(0);
        }
        write_blocks(file, &buf[..blocks])?;
    }
    Ok(total)
}

/// One vectored write of whole blocks, repeated until all of them are in.
fn write_blocks(mut file: &File, blocks: &[Block]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = blocks.iter().map(|b| IoSlice::new(&b.0)).collect();
    let mut left: &mut [IoSlice<'_>] = &mut slices;
    while !left.is_empty() {
        match file.write_vectored(left) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut left, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Cuts the padding off, syncs the data and the length, and closes.
fn finish(file: File, len: u64) -> io::Result<()> {
    file.set_len(len)?;
    file.sync_data()?;
    drop(file);
    Ok(())
}

/// Makes the staging file the object, durably: a rename (overwrite) or a
/// hard link (create; refused if the object exists), then the folder synced.
fn publish(staging: &FsPath, dest: &FsPath, mode: &PutMode) -> object_store::Result<()> {
    match mode {
        PutMode::Create => match std::fs::hard_link(staging, dest) {
            Ok(()) => {
                let _ = std::fs::remove_file(staging);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(object_store::Error::AlreadyExists {
                    path: dest.to_string_lossy().into_owned(),
                    source: Box::new(e),
                });
            }
            Err(e) => return Err(io_error(dest, e)),
        },
        _ => std::fs::rename(staging, dest).map_err(|e| io_error(dest, e))?,
    }
    match dest.parent() {
        Some(dir) => sync_dir(dir).map_err(|e| io_error(dir, e)),
        None => Ok(()),
    }
}

fn sync_dir(dir: &FsPath) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The e-tag `LocalFileSystem` gives the same file (inode, modification
/// time in microseconds, size), so a direct put and a read agree.
fn e_tag(meta: &std::fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    format!("\"{:x}-{:x}-{:x}\"", meta.ino(), mtime, meta.len())
}

fn io_error(path: &FsPath, e: io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalStore",
        source: format!("{}: {e}", path.display()).into(),
    }
}

#[async_trait]
impl ObjectStore for LocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let eligible = self.is_direct()
            && payload.content_length() >= DIRECT_MIN_BYTES
            && matches!(opts.mode, PutMode::Create | PutMode::Overwrite)
            && opts.attributes.is_empty();
        if !eligible {
            return self.inner.put_opts(location, payload, opts).await;
        }
        let dest = self.inner.path_to_filesystem(location)?;
        let (mode, buffers, data) = (opts.mode.clone(), self.buffers.clone(), payload.clone());
        let outcome =
            tokio::task::spawn_blocking(move || put_direct(&dest, &data, &mode, &buffers)).await;
        match outcome {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(DirectError::Failed(e))) => Err(e),
            Ok(Err(DirectError::Unsupported)) => {
                self.refused();
                self.inner.put_opts(location, payload, opts).await
            }
            Ok(Err(DirectError::Delegate)) => self.inner.put_opts(location, payload, opts).await,
            Err(join) => Err(object_store::Error::Generic {
                store: "LocalStore",
                source: Box::new(join),
            }),
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let Some(range) = own_range(&options) else {
            return self.inner.get_opts(location, options).await;
        };
        let path = self.inner.path_to_filesystem(location)?;
        let (wanted, direct) = (range.clone(), self.is_direct());
        let pool = self.read_buffers.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            if direct {
                read_direct(&path, wanted, &pool)
            } else {
                read_buffered(&path, wanted)
            }
        })
        .await;
        match outcome {
            Ok(Ok((bytes, meta))) => Ok(GetResult {
                payload: GetResultPayload::Stream(Box::pin(futures::stream::once(
                    futures::future::ready(Ok(bytes)),
                ))),
                meta: ObjectMeta {
                    location: location.clone(),
                    last_modified: meta
                        .modified()
                        .map(chrono::DateTime::<chrono::Utc>::from)
                        .unwrap_or_default(),
                    size: meta.len(),
                    e_tag: Some(e_tag(&meta)),
                    version: None,
                },
                range,
                attributes: Attributes::default(),
                extensions: Default::default(),
            }),
            Ok(Err(DirectError::Failed(e))) => Err(e),
            Ok(Err(DirectError::Unsupported)) => {
                self.refused();
                self.inner.get_opts(location, options).await
            }
            Ok(Err(DirectError::Delegate)) => self.inner.get_opts(location, options).await,
            Err(join) => Err(object_store::Error::Generic {
                store: "LocalStore",
                source: Box::new(join),
            }),
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;

    fn store(dir: &FsPath) -> LocalStore {
        store_with(dir, true)
    }

    fn store_with(dir: &FsPath, direct_io: bool) -> LocalStore {
        let fs = LocalFileSystem::new_with_prefix(dir)
            .unwrap()
            .with_fsync(true);
        LocalStore::new(fs, direct_io)
    }

    /// A payload in odd-sized chunks whose total is no multiple of a block
    /// and spans several write steps.
    fn payload(total: usize) -> (PutPayload, Vec<u8>) {
        let all: Vec<u8> = (0..total).map(|i| (i * 31 % 251) as u8).collect();
        let mut chunks = Vec::new();
        let (mut at, mut size) = (0, 1usize);
        while at < total {
            let n = size.min(total - at);
            chunks.push(Bytes::copy_from_slice(&all[at..at + n]));
            at += n;
            size = size * 7 % 300_001 + 1;
        }
        (chunks.into_iter().collect(), all)
    }

    async fn read(s: &LocalStore, p: &Path) -> Vec<u8> {
        s.get(p).await.unwrap().bytes().await.unwrap().to_vec()
    }

    async fn listed(s: &LocalStore) -> Vec<String> {
        let mut v: Vec<String> = s
            .list(None)
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        v.sort();
        v
    }

    /// Every file under `dir`, as object paths.
    fn files_in(dir: &FsPath) -> Vec<String> {
        let mut v = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(dir).unwrap();
                    let parts: Vec<String> = rel
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect();
                    v.push(parts.join("/"));
                }
            }
        }
        v.sort();
        v
    }

    #[tokio::test]
    async fn a_large_put_reads_back_whole_with_its_exact_length() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let sizes = [
            DIRECT_MIN_BYTES,
            STEP_BLOCKS * BLOCK,
            3 * STEP_BLOCKS * BLOCK + 12_345,
            5_000_001,
        ];
        for total in sizes {
            let (p, all) = payload(total);
            let at = Path::from(format!("wal/a/{total}.wal"));
            s.put(&at, p).await.unwrap();
            assert_eq!(s.head(&at).await.unwrap().size, total as u64);
            assert_eq!(read(&s, &at).await, all, "{total} bytes");
            let range = s.get_range(&at, 4095..60_001).await.unwrap();
            assert_eq!(&range[..], &all[4095..60_001]);
        }
        // Only the objects are on disk: no staging file is left behind.
        let mut want: Vec<String> = sizes.iter().map(|n| format!("wal/a/{n}.wal")).collect();
        want.sort();
        assert_eq!(files_in(dir.path()), want);
        assert_eq!(listed(&s).await, want);
    }

    #[tokio::test]
    async fn large_range_reads_match_the_page_cache_reads() {
        for direct_io in [true, false] {
            large_range_reads_match(direct_io).await;
        }
    }

    /// Direct reads, or buffered ones into a buffer not zeroed first, give
    /// `LocalFileSystem`'s answers.
    async fn large_range_reads_match(direct_io: bool) {
        let dir = tempfile::tempdir().unwrap();
        let s = store_with(dir.path(), direct_io);
        let plain = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        let total = 3 * STEP_BLOCKS * BLOCK + 777;
        let (p, all) = payload(total);
        let at = Path::from("seg/big.log");
        s.put(&at, p).await.unwrap();
        let t = total as u64;
        let ranges = [
            0..t,
            1..t,
            4095..4095 + 200_000,
            4096..4096 + 65_536,
            t - 70_000..t,
            1_048_575..1_048_577 + 70_000,
            0..DIRECT_MIN_BYTES as u64,
        ];
        for r in ranges {
            let got = s.get_range(&at, r.clone()).await.unwrap();
            assert_eq!(&got[..], &all[r.start as usize..r.end as usize], "{r:?}");
            let res = s
                .get_opts(
                    &at,
                    GetOptions {
                        range: Some(r.clone().into()),
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            assert_eq!(res.range, r);
            assert_eq!(res.meta.size, t);
            assert_eq!(
                res.meta.e_tag,
                plain.head(&at).await.unwrap().e_tag,
                "same e-tag"
            );
        }
        // Past the end and missing objects: LocalFileSystem's answers.
        let past = s.get_range(&at, t - 10..t + 100_000).await.unwrap();
        assert_eq!(&past[..], &all[total - 10..]);
        assert!(s.get_range(&at, t + 1..t + 100_000).await.is_err());
        let missing = s.get_range(&Path::from("nope"), 0..100_000).await;
        assert!(
            matches!(missing, Err(object_store::Error::NotFound { .. })),
            "{missing:?}"
        );
    }

    #[tokio::test]
    async fn direct_puts_are_used_where_the_filesystem_allows_them() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let (p, _) = payload(DIRECT_MIN_BYTES * 2);
        s.put(&Path::from("x"), p).await.unwrap();
        assert_eq!(s.is_direct(), supports_direct(dir.path()));
    }

    /// A store on a folder that takes `O_DIRECT` (none where the filesystem
    /// refuses it), holding one object of `len` bytes, and those bytes.
    async fn direct_store_holding(
        len: usize,
    ) -> Option<(tempfile::TempDir, LocalStore, Path, Vec<u8>)> {
        let dir = tempfile::tempdir().unwrap();
        if !supports_direct(dir.path()) {
            return None;
        }
        let s = store(dir.path());
        let (p, all) = payload(len);
        let at = Path::from("wal/1.wal");
        s.put(&at, p).await.unwrap();
        Some((dir, s, at, all))
    }

    /// A direct read hands out the buffer the device wrote into, not a copy
    /// of it: the range's first byte lies as far into an aligned block as
    /// it does into the file's block. (A copy into a fresh allocation starts
    /// at a 16-byte boundary, which 100 bytes into a block is not.)
    #[tokio::test]
    async fn a_direct_read_hands_out_the_buffer_it_read_into() {
        let Some((_dir, s, at, all)) = direct_store_holding(3 * STEP_BLOCKS * BLOCK).await else {
            return;
        };
        for start in [3 * BLOCK + 100, STEP_BLOCKS * BLOCK + 100] {
            let r = start as u64..(start + 500_000) as u64;
            let got = s.get_range(&at, r).await.unwrap();
            assert_eq!(&got[..], &all[start..start + 500_000]);
            assert_eq!(got.as_ptr() as usize % BLOCK, 100, "read at {start}");
        }
        assert!(s.is_direct());
    }

    /// A direct read's buffer goes back to the store once its last slice is
    /// dropped, and the next read of that size takes it (no new buffer to
    /// zero and fault in); a buffer still held is not given out again.
    #[tokio::test]
    async fn a_direct_reads_buffer_is_reused_once_let_go_of() {
        let Some((_dir, s, at, all)) = direct_store_holding(4 * STEP_BLOCKS * BLOCK).await else {
            return;
        };
        let mb = (STEP_BLOCKS * BLOCK) as u64;
        let first = s.get_range(&at, 0..mb).await.unwrap();
        let part = first.slice(10..20);
        drop(first);
        assert_eq!(s.read_buffers.idle(), 0, "a slice still holds it");
        let second = s.get_range(&at, mb..2 * mb).await.unwrap();
        assert_eq!(&part[..], &all[10..20], "a held buffer is not overwritten");
        drop(part);
        assert_eq!(s.read_buffers.idle(), 1);
        let third = s.get_range(&at, 2 * mb..3 * mb).await.unwrap();
        assert_eq!(s.read_buffers.idle(), 0, "the idle buffer was taken");
        assert_eq!(&second[..], &all[mb as usize..2 * mb as usize]);
        assert_eq!(&third[..], &all[2 * mb as usize..3 * mb as usize]);
        // A small read does not take a buffer many times its size.
        drop(third);
        let small = s.get_range(&at, 0..DIRECT_MIN_BYTES as u64).await.unwrap();
        assert_eq!(s.read_buffers.idle(), 1);
        assert_eq!(&small[..], &all[..DIRECT_MIN_BYTES]);
    }

    /// Probes a folder's filesystem the way the store does.
    fn supports_direct(dir: &FsPath) -> bool {
        let probe = dir.join("probe");
        let ok = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
            .is_ok();
        let _ = std::fs::remove_file(probe);
        ok
    }

    #[tokio::test]
    async fn create_refuses_an_existing_object_and_overwrite_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let at = Path::from("seg/1.log");
        let (first, first_bytes) = payload(200_000);
        let create = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        s.put_opts(&at, first, create.clone()).await.unwrap();
        let (second, second_bytes) = payload(300_000);
        let refused = s.put_opts(&at, second.clone(), create).await;
        assert!(
            matches!(refused, Err(object_store::Error::AlreadyExists { .. })),
            "{refused:?}"
        );
        assert_eq!(read(&s, &at).await, first_bytes);
        s.put(&at, second).await.unwrap();
        assert_eq!(read(&s, &at).await, second_bytes);
        assert_eq!(files_in(dir.path()), vec!["seg/1.log".to_string()]);
    }

    #[tokio::test]
    async fn small_puts_and_a_filesystem_without_o_direct_go_through_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        s.put(&Path::from("small"), PutPayload::from_static(b"tiny"))
            .await
            .unwrap();
        assert_eq!(read(&s, &Path::from("small")).await, b"tiny");
        // tmpfs refused O_DIRECT before Linux 6.6: the store notices and
        // falls back; on newer kernels it takes direct puts.
        let shm = FsPath::new("/dev/shm");
        if shm.is_dir()
            && let Ok(dir) = tempfile::tempdir_in(shm)
        {
            let s = store(dir.path());
            let (p, all) = payload(DIRECT_MIN_BYTES * 3);
            s.put(&Path::from("a/b"), p).await.unwrap();
            assert_eq!(read(&s, &Path::from("a/b")).await, all);
            assert_eq!(s.is_direct(), supports_direct(dir.path()));
            assert_eq!(files_in(dir.path()), vec!["a/b".to_string()]);
        }
    }
}
