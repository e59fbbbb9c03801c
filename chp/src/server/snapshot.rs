//! Serving ICANHAZ? requests: each snapshot streams from its own task, in chunks, while the server
//! keeps applying updates.
//!
//! **Why a chunked ("fuzzy") snapshot is exact.** The stream records the sequence `S` when it
//! starts, sends every KVSYNC with the values current when its chunk is read (each ≥ `S`), and ends
//! with KTHXBAI `S`. The client subscribed before asking, so it also receives every KVPUB after `S`
//! and applies them in order on top of the snapshot: a key changed while the snapshot was streaming
//! ends at its last published value, a key that was not changed keeps its value at `S`. This is the
//! redo-log argument of fuzzy checkpoints; it lets a 1M-key snapshot stream to a slow client without
//! stopping the server (or copying the map).
//!
//! **Fairness and abuse.** Requests from one peer are served one at a time (a request that arrives
//! while one is streaming replaces any earlier waiting one), at most `max_concurrent` stream at
//! once (the others wait in arrival order, holding nothing), and each streams no faster than its
//! peer reads: the socket queues a chunk only while less than the per-peer byte budget is queued
//! for it (ROUTER_MANDATORY makes a full queue block us), so at most the budget plus one chunk; one
//! more chunk is encoded from the map while that one waits; and a stream keeps its slot until its
//! peer has taken everything queued for it. So memory is bounded by `max_concurrent` × (budget +
//! two chunks), however many peers ask. A peer that reads
//! nothing for `stall_timeout` — or for [`CONTENDED_STALL`] while other snapshots wait for a
//! slot, so that stalled peers cannot hold every slot — or that disconnects (`HostUnreachable`)
//! has its snapshot abandoned and is dropped, which frees what was queued for it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Semaphore;
use zmtp::{EncodedBatch, Message, Socket};

use super::Shared;
use crate::command::{IcanHaz, KTHXBAI, Subtree, parse_peersync};
use crate::kvmsg::sequence_frame;

/// Why a snapshot stream was abandoned: the peer left, read too slowly, or the socket failed.
#[derive(Debug, thiserror::Error)]
enum Abandoned {
    /// The peer disconnected (ROUTER_MANDATORY: its routing id is gone).
    #[error("peer disconnected")]
    Disconnected,
    /// The peer read nothing for this long while other snapshots waited for a slot
    /// ([`CONTENDED_STALL`]).
    #[error("peer read nothing for {0:?} while other snapshots wait")]
    Contended(Duration),
    /// The peer read nothing for this long (the stall timeout).
    #[error("peer read nothing for {0:?}")]
    Stalled(Duration),
    /// Sending failed for another reason.
    #[error("cannot send: {0}")]
    Send(#[source] zmtp::Error),
}

/// What a peer asked for.
impl From<zmtp::Error> for Abandoned {
    fn from(e: zmtp::Error) -> Abandoned {
        match e {
            zmtp::Error::HostUnreachable(_) => Abandoned::Disconnected,
            e => Abandoned::Send(e),
        }
    }
}

#[derive(Clone, Debug)]
enum Request {
    /// A client's ICANHAZ?: the subtree, 12/CHP KVSYNCs.
    Client(Subtree),
    /// The pair's other server (PEERSYNC?): the whole map with remaining ttls.
    Peer,
}

/// Encodes the chunk after a key (`None`: from the start) into a batch; the last key encoded
/// (`None`: nothing was left).
type EncodeChunk<'a> = dyn Fn(Option<&[u8]>, &mut EncodedBatch) -> Option<Bytes> + Sync + 'a;

/// KVSYNCs read from the state per lock.
const CHUNK: usize = 512;
/// Bytes of keys and values copied out of the state per lock (at least one entry): with the
/// socket's per-peer byte budget this bounds what one snapshot stream holds, whatever the values.
const CHUNK_BYTES: usize = 64 * 1024;
/// How long a snapshot may wait for a peer that reads nothing while other snapshots wait for a slot.
pub const CONTENDED_STALL: Duration = Duration::from_millis(250);

pub(super) struct Snapshots {
    router: Socket,
    shared: Arc<Shared>,
    /// Peers with a snapshot streaming, and the request waiting behind it.
    busy: Arc<Mutex<HashMap<Bytes, Option<Request>>>>,
    permits: Arc<Semaphore>,
    /// Streams waiting for a permit.
    waiting: Arc<AtomicUsize>,
    stall_timeout: Duration,
    /// The epoch to put in a peer's KTHXBAI (0: none).
    epoch: Arc<AtomicU64>,
}

impl Snapshots {
    pub(super) fn new(router: Socket, shared: Arc<Shared>, max_concurrent: usize, stall_timeout: Duration) -> Self {
        Snapshots {
            router,
            shared,
            busy: Arc::default(),
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            waiting: Arc::default(),
            stall_timeout,
            epoch: Arc::default(),
        }
    }

    /// The epoch a peer's KTHXBAI carries from now on (a durable pair server's).
    pub(super) fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    /// Handles one message from the SNAPSHOT socket: `[routing id, "ICANHAZ?", subtree]` (or
    /// `[routing id, "PEERSYNC?"]` from the other server of a pair).
    pub(super) fn request(&self, msg: Message) {
        let mut frames = msg.into_frames();
        if frames.is_empty() {
            return;
        }
        let identity = frames.remove(0);
        let parsed = match &frames[..] {
            _ if parse_peersync(&frames).is_some() => Ok(Request::Peer),
            _ => IcanHaz::parse(&frames).map(|r| Request::Client(r.subtree)),
        };
        let request = match parsed {
            Ok(r) => r,
            Err(e) => {
                self.shared.stats.rejected.inc();
                if let Some(suppressed) = zmtp::throttle::allow("chp: bad snapshot request") {
                    tracing::warn!(peer = ?identity, error = %e, suppressed, "dropped bad snapshot request");
                }
                return;
            }
        };
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(waiting) = busy.get_mut(&identity) {
            tracing::debug!(peer = ?identity, "snapshot request queued behind a running one");
            *waiting = Some(request);
            return;
        }
        busy.insert(identity.clone(), None);
        drop(busy);
        let task = Stream {
            router: self.router.clone(),
            shared: self.shared.clone(),
            permits: self.permits.clone(),
            waiting: self.waiting.clone(),
            stall_timeout: self.stall_timeout,
            identity,
            epoch: self.epoch.clone(),
        };
        let busy = self.busy.clone();
        tokio::spawn(async move {
            let mut request = request;
            loop {
                task.serve(&request).await;
                let mut map = busy.lock().unwrap_or_else(|e| e.into_inner());
                match map.get_mut(&task.identity).and_then(Option::take) {
                    Some(next) => request = next,
                    None => {
                        map.remove(&task.identity);
                        break;
                    }
                }
            }
        });
    }
}

struct Stream {
    router: Socket,
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    stall_timeout: Duration,
    identity: Bytes,
    epoch: Arc<AtomicU64>,
}

impl Stream {
    async fn serve(&self, request: &Request) {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let permit = self.permits.acquire().await;
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        let Ok(_permit) = permit else { return };
        let (result, what) = match request {
            Request::Client(subtree) => (self.stream(subtree).await, subtree.to_string()),
            Request::Peer => (self.stream_to_peer().await, "(peer)".to_owned()),
        };
        match result {
            Ok(keys) => {
                // Counted once all of it is queued (its peer may already have it), as before the
                // wait below existed.
                self.shared.stats.snapshots.inc();
                tracing::debug!(peer = ?self.identity, subtree = %what, keys, "snapshot sent");
                if let Err(why) = self.flushed().await {
                    // Queued but never taken: shed the peer, which frees it.
                    self.router.drop_peer(&self.identity);
                    tracing::info!(peer = ?self.identity, subtree = %what, "snapshot not taken, peer dropped: {why}");
                }
            }
            Err(why) => {
                self.shared.stats.snapshots_aborted.inc();
                // Shed the peer: what is still queued for it (up to the per-peer byte budget) is
                // freed now, not when it finally disconnects.
                self.router.drop_peer(&self.identity);
                tracing::info!(peer = ?self.identity, subtree = %what, "snapshot abandoned, peer dropped: {why}");
            }
        }
    }

    async fn stream(&self, subtree: &Subtree) -> Result<usize, Abandoned> {
        let sequence = self.shared.lock().sequence();
        let seq_frame = sequence_frame(sequence);
        let sent = self
            .stream_chunks(&|after, batch| {
                self.shared.lock().encode_snapshot_chunk(subtree, after, (CHUNK, CHUNK_BYTES), &seq_frame, batch)
            })
            .await?;
        self.send_end(&seq_frame, b"", &subtree.to_bytes()).await?;
        Ok(sent)
    }

    /// The whole map for the pair's other server: the same fuzzy-snapshot argument holds (it
    /// follows our publisher before asking), and each KVSYNC carries `ttl=` with the time the key
    /// has left, measured when its chunk is read.
    async fn stream_to_peer(&self) -> Result<usize, Abandoned> {
        let sequence = self.shared.lock().sequence();
        let seq_frame = sequence_frame(sequence);
        let sent = self
            .stream_chunks(&|after, batch| {
                let state = self.shared.lock();
                let now = std::time::Instant::now();
                state.encode_peer_snapshot_chunk(after, (CHUNK, CHUNK_BYTES), now, &seq_frame, batch)
            })
            .await?;
        let properties = match self.epoch.load(Ordering::Relaxed) {
            0 => String::new(),
            epoch => format!("epoch={epoch}\n"),
        };
        self.send_end(&seq_frame, properties.as_bytes(), b"").await?;
        Ok(sent)
    }

    /// Sends the chunks `encode` makes (each read under one lock of the state, after the last
    /// key of the one before) until it has none left; how many KVSYNCs. (`dyn`: one copy of this
    /// loop serves both kinds of snapshot, which the size-limited build counts.)
    async fn stream_chunks(&self, encode: &EncodeChunk<'_>) -> Result<usize, Abandoned> {
        let mut after: Option<Bytes> = None;
        let mut sent = 0;
        let mut batch = EncodedBatch::new();
        loop {
            after = encode(after.as_deref(), &mut batch);
            if after.is_none() {
                return Ok(sent);
            }
            sent += batch.len();
            self.send_encoded(&mut batch).await?;
            // The sends above may all have found room without awaiting: take part in tokio's
            // budget once per chunk, so a long snapshot never starves the server's other tasks.
            tokio::task::coop::consume_budget().await;
        }
    }

    /// Holds the stream's slot until the peer has taken everything queued for it (written to its
    /// connection). A snapshot smaller than the per-peer byte budget is queued whole without
    /// waiting, so without this its slot came free at once and every client of a reconnect storm
    /// had its snapshot in the server's memory together (4,800 clients × 1,000 keys: 700 MB).
    /// A peer that has not taken it within the stall timeout is abandoned.
    async fn flushed(&self) -> Result<(), Abandoned> {
        match tokio::time::timeout(self.stall_timeout, self.router.flushed(&self.identity)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Abandoned::from(e)),
            Err(_) => Err(Abandoned::Stalled(self.stall_timeout)),
        }
    }

    /// Sends a chunk, waiting while the peer's queue is full: abandoned once the peer has taken
    /// nothing for the stall timeout, or for [`CONTENDED_STALL`] while other snapshots wait for a
    /// slot. The peer took something when the queue found room, so the clock runs per chunk.
    async fn send_encoded(&self, batch: &mut EncodedBatch) -> Result<(), Abandoned> {
        let started = tokio::time::Instant::now();
        loop {
            // `send_encoded` is cancel-safe: a timed-out attempt leaves the batch whole.
            match tokio::time::timeout(CONTENDED_STALL, self.router.send_encoded(&self.identity, batch)).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => return Err(Abandoned::from(e)),
                Err(_) => {
                    let stalled = started.elapsed();
                    if self.waiting.load(Ordering::Relaxed) > 0 {
                        return Err(Abandoned::Contended(stalled));
                    }
                    if stalled >= self.stall_timeout {
                        return Err(Abandoned::Stalled(stalled));
                    }
                }
            }
        }
    }

    /// The snapshot's end: KTHXBAI with the snapshot's sequence, `properties` and `body`.
    async fn send_end(&self, seq_frame: &[u8], properties: &[u8], body: &[u8]) -> Result<(), Abandoned> {
        let mut end = EncodedBatch::new();
        end.push(&[KTHXBAI.as_bytes(), seq_frame, b"", properties, body]).expect("KTHXBAI has five frames");
        self.send_encoded(&mut end).await
    }
}
