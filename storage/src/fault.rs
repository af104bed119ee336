//! A fault-injecting wrapper around any object store, for tests: errors,
//! delays, hangs, and transfers that break after N bytes.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// What goes wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The operation fails at once.
    Error,
    /// The operation succeeds after a pause.
    Delay(Duration),
    /// The operation never completes.
    Hang,
    /// A write stores only the first N bytes and then fails; a read returns
    /// the first N bytes and then fails.
    FailAfterBytes(usize),
}

/// Which operations a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOps {
    Writes,
    Reads,
    All,
}

#[derive(Debug, Default)]
struct State {
    rule: Option<(Fault, FaultOps, Option<u32>)>,
}

/// Controls the faults of one [`FaultyStore`] while it is in use.
#[derive(Debug, Clone)]
pub struct FaultHandle {
    state: Arc<Mutex<State>>,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    puts: AtomicU64,
    gets: AtomicU64,
    faults: AtomicU64,
}

impl FaultHandle {
    /// Applies `fault` to `ops` until cleared.
    pub fn set(&self, fault: Fault, ops: FaultOps) {
        self.lock().rule = Some((fault, ops, None));
    }

    /// Applies `fault` to the next `times` matching operations only.
    pub fn set_times(&self, fault: Fault, ops: FaultOps, times: u32) {
        self.lock().rule = Some((fault, ops, Some(times)));
    }

    pub fn clear(&self) {
        self.lock().rule = None;
    }

    /// Put attempts seen (faulted or not).
    pub fn puts(&self) -> u64 {
        self.counters.puts.load(Ordering::Relaxed)
    }

    /// Get attempts seen (faulted or not).
    pub fn gets(&self) -> u64 {
        self.counters.gets.load(Ordering::Relaxed)
    }

    /// Operations that met a fault.
    pub fn faults(&self) -> u64 {
        self.counters.faults.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, write: bool) -> Option<Fault> {
        let mut st = self.lock();
        let (fault, ops, remaining) = st.rule.as_mut()?;
        let applies = match ops {
            FaultOps::Writes => write,
            FaultOps::Reads => !write,
            FaultOps::All => true,
        };
        if !applies {
            return None;
        }
        let fault = fault.clone();
        if let Some(n) = remaining {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.rule = None;
            }
        }
        self.counters.faults.fetch_add(1, Ordering::Relaxed);
        Some(fault)
    }
}

/// An [`ObjectStore`] that passes every call to `inner` unless a fault is set.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    handle: FaultHandle,
}

impl FaultyStore {
    pub fn wrap(inner: Arc<dyn ObjectStore>) -> (Arc<Self>, FaultHandle) {
        let handle = FaultHandle {
            state: Arc::default(),
            counters: Arc::default(),
        };
        (
            Arc::new(Self {
                inner,
                handle: handle.clone(),
            }),
            handle,
        )
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultyStore",
        source: format!("injected fault: {what}").into(),
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.handle.counters.puts.fetch_add(1, Ordering::Relaxed);
        match self.handle.take(true) {
            None => self.inner.put_opts(location, payload, opts).await,
            Some(Fault::Error) => Err(injected("write error")),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                self.inner.put_opts(location, payload, opts).await
            }
            Some(Fault::Hang) => futures::future::pending().await,
            Some(Fault::FailAfterBytes(n)) => {
                let all: Vec<u8> = payload.iter().flat_map(|b| b.iter().copied()).collect();
                let torn = PutPayload::from(all[..n.min(all.len())].to_vec());
                self.inner.put_opts(location, torn, opts).await?;
                Err(injected("connection lost mid-write"))
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        if let Some(f) = self.handle.take(true) {
            return Err(injected(&format!("{f:?} on multipart upload")));
        }
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.handle.counters.gets.fetch_add(1, Ordering::Relaxed);
        match self.handle.take(false) {
            None => self.inner.get_opts(location, options).await,
            Some(Fault::Error) => Err(injected("read error")),
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                self.inner.get_opts(location, options).await
            }
            Some(Fault::Hang) => futures::future::pending().await,
            Some(Fault::FailAfterBytes(n)) => {
                let res = self.inner.get_opts(location, options).await?;
                let meta = res.meta.clone();
                let range: Range<u64> = res.range.clone();
                let attributes = res.attributes.clone();
                let bytes = res.bytes().await?;
                let head = bytes.slice(..n.min(bytes.len()));
                let stream = futures::stream::iter(vec![
                    Ok(head),
                    Err(injected("connection lost mid-read")),
                ])
                .boxed();
                Ok(GetResult {
                    payload: GetResultPayload::Stream(stream),
                    meta,
                    range,
                    attributes,
                    extensions: Default::default(),
                })
            }
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
