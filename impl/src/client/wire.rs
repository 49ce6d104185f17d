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
