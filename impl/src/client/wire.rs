//! What the wire saw of a client's acquires, so that a caller that left one can say whether
//! the node surely learns that nobody read its grant.
//!
//! A node releases the grant of an acquire whose client left (DESIGN.md "Phantom locks")
//! when it sees the client go: tarpc's `Cancel` for the call, before or after the handler
//! answered (`server::clients::CancelWatch`), or the end of the connection before the answer
//! was written. tarpc's client sends `Cancel` only for a call still in flight at its dispatch
//! task: when the answer has already been read off the socket as the caller drops the call,
//! no `Cancel` goes out, and to the node that grant is indistinguishable from one its client
//! read (it keeps its key until the lease ends). So has a connection cut with nothing sent
//! (the fault point `client-cut-connection`). [`Watched`] notes, per acquire request
//! ([`Origin`]), every attempt written, every `Cancel` written and every answer read;
//! [`Fate::announced`] says whether every attempt that went out was cancelled on the wire or
//! answered without a grant.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Sink, Stream};

use crate::lock::Origin;
use crate::raft::Response;
use crate::rpc::{LockServiceRequest, LockServiceResponse};

/// How many acquire requests a [`Ledger`] remembers, newest last.
const REMEMBERED: usize = 16;

/// What the wire saw of one acquire request's attempts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fate {
    /// Attempts written to a connection.
    pub sent: u32,
    /// `Cancel`s written for them before an answer was read.
    pub cancelled: u32,
    /// Answers read for them.
    pub answered: u32,
    /// Whether one of those answers was `Granted`.
    pub granted: bool,
}

impl Fate {
    /// Every attempt that went out was cancelled on the wire or answered without a grant,
    /// so the node knows of every grant of this request that nobody read.
    pub fn announced(&self) -> bool {
        !self.granted && self.cancelled + self.answered >= self.sent
    }

    /// Nothing more will change what is known: announced, or a grant was read.
    fn settled(&self) -> bool {
        self.granted || self.announced()
    }
}

/// The fates of a client's latest acquire requests, shared by its connections.
#[derive(Clone, Default)]
pub(super) struct Ledger(Arc<Mutex<LedgerState>>);

#[derive(Default)]
struct LedgerState {
    fates: HashMap<Origin, Fate>,
    order: VecDeque<Origin>,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        // Poisoned only if a task panicked holding it; the counts are still valid.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, origin: Origin, change: impl FnOnce(&mut Fate)) {
        let mut state = self.lock();
        if !state.fates.contains_key(&origin) {
            if state.order.len() >= REMEMBERED
                && let Some(oldest) = state.order.pop_front()
            {
                state.fates.remove(&oldest);
            }
            state.order.push_back(origin);
        }
        change(state.fates.entry(origin).or_default());
    }

    /// What the wire saw of `origin`'s attempts so far.
    pub(super) fn fate(&self, origin: Origin) -> Fate {
        self.lock().fates.get(&origin).copied().unwrap_or_default()
    }

    /// Whether the node surely learns that nobody read a grant of `origin`: waits up to
    /// `within` for the connections' dispatch tasks to write the cancellations of a dropped
    /// call (or read its answer), then says whether [`Fate::announced`].
    pub(super) async fn announced(&self, origin: Origin, within: Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            let fate = self.fate(origin);
            if fate.settled() || tokio::time::Instant::now() >= until {
                return fate.announced();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A client connection's transport that notes its acquires' attempts, cancellations and
/// answers in a [`Ledger`].
pub(super) struct Watched<T> {
    inner: T,
    /// The acquire requests in flight on this connection, by tarpc request id.
    in_flight: HashMap<u64, Origin>,
    ledger: Ledger,
}

impl<T> Watched<T> {
    pub(super) fn new(inner: T, ledger: Ledger) -> Self {
        Watched {
            inner,
            in_flight: HashMap::new(),
            ledger,
        }
    }

    fn sending(&mut self, message: &tarpc::ClientMessage<LockServiceRequest>) {
        match message {
            tarpc::ClientMessage::Request(request) => {
                if let LockServiceRequest::Acquire {
                    origin: Some(origin),
                    ..
                } = &request.message
                {
                    self.in_flight.insert(request.id, *origin);
                    self.ledger.update(*origin, |fate| fate.sent += 1);
                }
            }
            tarpc::ClientMessage::Cancel { request_id, .. } => {
                if let Some(origin) = self.in_flight.remove(request_id) {
                    self.ledger.update(origin, |fate| fate.cancelled += 1);
                }
            }
            // Non-exhaustive upstream; nothing else carries a request of ours.
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }

    fn received(&mut self, response: &tarpc::Response<LockServiceResponse>) {
        let Some(origin) = self.in_flight.remove(&response.request_id) else {
            return;
        };
        let granted = matches!(
            response.message,
            Ok(LockServiceResponse::Acquire(Response::Granted { .. }))
        );
        self.ledger.update(origin, |fate| {
            fate.answered += 1;
            fate.granted |= granted;
        });
    }
}

impl<T, E> Stream for Watched<T>
where
    T: Stream<Item = Result<tarpc::Response<LockServiceResponse>, E>> + Unpin,
{
    type Item = T::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(Some(Ok(response))) = &polled {
            self.received(response);
        }
        polled
    }
}

impl<T> Sink<tarpc::ClientMessage<LockServiceRequest>> for Watched<T>
where
    T: Sink<tarpc::ClientMessage<LockServiceRequest>> + Unpin,
{
    type Error = T::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_ready(cx)
    }

    fn start_send(
        mut self: Pin<&mut Self>,
        item: tarpc::ClientMessage<LockServiceRequest>,
    ) -> Result<(), T::Error> {
        self.sending(&item);
        Pin::new(&mut self.inner).start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// How long a closed connection keeps reading what the node still sends
/// ([`Lingering`]).
const LINGER: Duration = Duration::from_secs(1);

/// A client socket that closes gracefully: dropped, it shuts its write half (after what was
/// written, such as the `Cancel` of a call dropped just before) and goes on reading, for at
/// most [`LINGER`], until the node closes its side. Closed at once, a socket that then
/// receives an answer still on its way (the grant of that cancelled call) answers it with a
/// reset, and a TCP stack that flushes its receive queue on a reset (RFC 793 §3.4, which
/// turmoil's follows) loses the `Cancel` before the node reads it: the node never learns
/// that nobody read the grant, which keeps its key for the whole lease (found by liveness
/// rule P on sim seed 7, 2026-12-06). A web server's "lingering close" avoids the same
/// reset for the same reason.
pub(super) struct Lingering {
    stream: Option<crate::sys::net::TcpStream>,
}

impl Lingering {
    pub(super) fn new(stream: crate::sys::net::TcpStream) -> Self {
        Lingering {
            stream: Some(stream),
        }
    }

    fn stream(&mut self) -> Pin<&mut crate::sys::net::TcpStream> {
        Pin::new(
            self.stream
                .as_mut()
                .expect("the stream is taken only when dropped"),
        )
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(mut stream) = self.stream.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let drain = async {
                let _ = stream.shutdown().await;
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(LINGER, drain).await;
        });
    }
}

impl tokio::io::AsyncRead for Lingering {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.stream().poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Lingering {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.stream().poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.stream().poll_shutdown(cx)
    }
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures::StreamExt;
    use tarpc::server::{BaseChannel, Channel};

    use super::*;
    use crate::client::tests::ScriptedNode;
    use crate::client::{Client, ClientOptions};
    use crate::rpc::LockService;

    /// What the node saw of one client connection.
    #[derive(Default)]
    struct NodeSaw {
        /// The acquires' answers still to give: empty once it granted (one `Granted`).
        script: Arc<Mutex<Vec<Response>>>,
        /// It read a `Cancel` after it had granted.
        cancel_after_grant: AtomicBool,
        /// Its read of the connection failed (a reset).
        read_failed: AtomicBool,
    }

    impl NodeSaw {
        fn granted(&self) -> bool {
            self.script
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty()
        }
    }

    /// The node's side of a connection, noting each `Cancel` and read error.
    struct Noted<T> {
        inner: T,
        saw: Arc<NodeSaw>,
    }

    impl<T, E> Stream for Noted<T>
    where
        T: Stream<Item = Result<tarpc::ClientMessage<LockServiceRequest>, E>> + Unpin,
    {
        type Item = T::Item;

        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T::Item>> {
            let polled = Pin::new(&mut self.inner).poll_next(cx);
            match &polled {
                Poll::Ready(Some(Ok(tarpc::ClientMessage::Cancel { .. })))
                    if self.saw.granted() =>
                {
                    self.saw.cancel_after_grant.store(true, Ordering::SeqCst);
                }
                Poll::Ready(Some(Err(_))) => self.saw.read_failed.store(true, Ordering::SeqCst),
                _ => {}
            }
            polled
        }
    }

    impl<T, I> Sink<I> for Noted<T>
    where
        T: Sink<I> + Unpin,
    {
        type Error = T::Error;

        fn poll_ready(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), T::Error>> {
            Pin::new(&mut self.inner).poll_ready(cx)
        }

        fn start_send(mut self: Pin<&mut Self>, item: I) -> Result<(), T::Error> {
            Pin::new(&mut self.inner).start_send(item)
        }

        fn poll_flush(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), T::Error>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_close(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), T::Error>> {
            Pin::new(&mut self.inner).poll_close(cx)
        }
    }

    /// One simulated run with turmoil seed `seed`: a client takes one op to connect and
    /// time a round trip, then acquires and drops the call and itself half a round trip to
    /// nine tenths of one later, the node's grant often on the wire back. Returns what the
    /// node saw, or `None` when the client read its grant in time (or its connection did:
    /// then no `Cancel` is sent, [`Client::departure`]).
    fn drop_while_the_grant_is_on_the_wire(seed: u64) -> Option<Arc<NodeSaw>> {
        let mut sim = turmoil::Builder::new()
            .rng_seed(seed)
            .tick_duration(Duration::from_millis(1))
            .min_message_latency(Duration::from_millis(1))
            .max_message_latency(Duration::from_millis(20))
            .enable_random_order()
            .build();
        let saw = Arc::new(NodeSaw {
            script: Arc::new(Mutex::new(vec![Response::Granted { token: 9 }])),
            ..NodeSaw::default()
        });
        let node_saw = saw.clone();
        sim.host("node", move || {
            let saw = node_saw.clone();
            async move {
                let any: SocketAddr = "0.0.0.0:7000".parse()?;
                let listener = crate::sys::net::TcpListener::bind(any).await?;
                loop {
                    let stream = listener.accept().await?;
                    let transport = Noted {
                        inner: crate::server::transport(stream),
                        saw: saw.clone(),
                    };
                    let node = ScriptedNode {
                        acquires: saw.script.clone(),
                        releases: Arc::default(),
                    };
                    tokio::spawn(
                        BaseChannel::with_defaults(transport)
                            .execute(node.serve())
                            .for_each(|request| async move {
                                tokio::spawn(request);
                            }),
                    );
                }
            }
        });
        let read_in_time = Arc::new(AtomicBool::new(false));
        let read = read_in_time.clone();
        sim.client("client", async move {
            let node = SocketAddr::new(turmoil::lookup("node"), 7000);
            let client = Client::with_options(vec![node], 1, ClientOptions::default());
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            let timed = tokio::time::Instant::now();
            client.release("k", 1, deadline).await?;
            let round_trip = timed.elapsed();
            let acquire = client.acquire("k", 1_000, 0, deadline);
            // 50 to 90 % of a round trip: from before the node can answer to after.
            let leave_percent = 50 + 10 * (seed % 5) as u32;
            if tokio::time::timeout(round_trip * leave_percent / 100, acquire)
                .await
                .is_ok()
            {
                read.store(true, Ordering::SeqCst);
            }
            let departure = client.departure(Duration::from_millis(100));
            drop(client);
            if !departure.await {
                // The grant was read off the socket first: no `Cancel` is owed.
                read.store(true, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok(())
        });
        sim.run().expect("the simulation runs");
        (!read_in_time.load(Ordering::SeqCst)).then_some(saw)
    }

    #[test]
    fn a_client_that_drops_its_call_and_itself_gets_its_cancel_to_the_node() {
        // Sim seed 7 (2026-12-06, liveness rule P with lockd's promise to release a grant
        // whose call was cancelled): a client dropped its acquire and then itself while the
        // grant was on the wire back; its socket, closed at once, answered the grant with a
        // reset, the reset overtook the `Cancel`, and the node's read failed without it. The
        // node never learned that nobody read the grant: its key stayed held for the lease.
        // Without the lingering close it failed on turmoil seed 11 (the node's read failed
        // with a reset).
        let mut crossed = 0;
        for seed in 0..200 {
            let Some(saw) = drop_while_the_grant_is_on_the_wire(seed) else {
                continue;
            };
            if !saw.granted() {
                continue;
            }
            crossed += 1;
            assert!(
                saw.cancel_after_grant.load(Ordering::SeqCst),
                "turmoil seed {seed}: the node granted, and never read the client's Cancel \
                 (its read failed: {})",
                saw.read_failed.load(Ordering::SeqCst)
            );
        }
        assert!(
            crossed >= 5,
            "only {crossed} of 200 seeds granted while the client left"
        );
    }
}
