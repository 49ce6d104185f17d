//! Client connections: the `LockService`, the EOF-aware transport that tells a handler its
//! client died, and the guard that reports a departure to the core.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::prelude::*;
use tarpc::context;
use tarpc::server::{BaseChannel, Channel};
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tracing::{debug, warn};

use super::{CLIENT_CONNECTIONS_MAX, CLIENT_REQUESTS_PER_CONNECTION_MAX, Event, served_transport};
use crate::lock::{Key, Origin, Token};
use crate::raft::{ClientRequest, RequestId, Response};
use crate::rpc::{LockService, NodeStatus};
use crate::sys::net::TcpListener;

/// The longest a client may ask a node to work on one request, ms.
const CLIENT_TIMEOUT_MS_MAX: u64 = 600_000;

/// A transport that flips `closed` when its read half ends (EOF or error): the only signal
/// that a client died while its request is still being handled (research/design.md §2.4).
#[derive(Debug)]
pub struct EofNotify<T> {
    inner: T,
    closed: watch::Sender<bool>,
    /// The mutant `connection-end-unseen` (`crate::bugs`): the end is never told.
    unseen: bool,
}

impl<T> EofNotify<T> {
    /// Wraps `inner`; the returned receiver turns `true` when the read half ends.
    pub fn new(inner: T) -> (Self, watch::Receiver<bool>) {
        let (closed, receiver) = watch::channel(false);
        let unseen = false;
        (
            EofNotify {
                inner,
                closed,
                unseen,
            },
            receiver,
        )
    }
}

impl<T> Drop for EofNotify<T> {
    /// A transport dropped is a connection ended, also when it ended on a write error with
    /// its read half still open: the handlers still working for it give up, and a grant
    /// settled after this is released ([`AnsweredGrant::settle`]).
    fn drop(&mut self) {
        if !self.unseen {
            self.closed.send_replace(true);
        }
    }
}

impl<T, I, E> Stream for EofNotify<T>
where
    T: Stream<Item = Result<I, E>> + Unpin,
{
    type Item = T::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) && !self.unseen {
            self.closed.send_replace(true);
        }
        polled
    }
}

impl<T, S> Sink<S> for EofNotify<T>
where
    T: Sink<S> + Unpin,
{
    type Error = T::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: S) -> Result<(), T::Error> {
        Pin::new(&mut self.inner).start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// How many grants a connection remembers after its handlers answered them, for
/// [`CancelWatch`]: a cancellation for a request trails its answer by at most the requests in
/// flight.
const ANSWERED_GRANTS_REMEMBERED: usize = 2 * CLIENT_REQUESTS_PER_CONNECTION_MAX;

/// The grants a connection's handlers answered, newest last, by tarpc request id: filled at
/// the `Serve` boundary ([`CheckedServe`]), where the handler's answer leaves it, before
/// tarpc writes it or drops it; read by [`CancelWatch`]. Also the requests whose `Cancel`
/// found no grant recorded: on `lockd`'s multi-threaded runtime the connection's task can
/// read a `Cancel` after a handler passed its last abort point and before its grant reached
/// the boundary; `BaseChannel` then drops that answer unwritten, so the grant, recorded
/// after its `Cancel`, is an orphan (a review defect of 2026-12-06: nothing released it).
///
/// # The connection's account of its grants
///
/// Every grant that reaches the `Serve` boundary must end in one of two ways: written to the
/// connection while it is open (its client may read it; if that client dies first, the lease
/// is the backstop), or released as an orphan. The paths that release one are several and
/// race with each other (the boundary sees the connection closed, a `Cancel` is read before
/// or after the record, the answer is written after the connection's end, the connection is
/// dropped with answers unwritten), and a mistake in any of them leaves a phantom lock that
/// no history can tell from a grant whose client died after reading it. So the connection
/// keeps an account apart from those decisions ([`Account`]): it sees each grant reach the
/// boundary, every `Cancel` read, every answer written and whether the connection was open
/// then, and every release through [`AnsweredGrants::orphan`]. When the connection and all
/// its handlers are gone, it holds the node to the contract: a grant whose call was
/// cancelled was released when the `Cancel` was read (not only at the end), and every other
/// grant was written to the open connection or released. A breach is a phantom lock: under
/// the simulator the node stops, and node health names it; outside it, an error line.
#[derive(Clone, Default)]
struct AnsweredGrants(Arc<std::sync::Mutex<AnsweredState>>);

#[derive(Default)]
struct AnsweredState {
    /// The mutant `cancel-crossing-answer-forgotten` (`crate::bugs`): a `Cancel` that found
    /// no grant is forgotten.
    forget_cancels: bool,
    /// Grants answered, newest last, at most [`ANSWERED_GRANTS_REMEMBERED`].
    grants: std::collections::VecDeque<Recorded>,
    /// Requests cancelled with no grant recorded, newest last, at most as many: most were
    /// still being handled, and their handlers' [`GoneGuard`]s report them.
    cancelled: std::collections::VecDeque<u64>,
    /// Where orphans and a broken account go: the core's inbox (none in some unit tests).
    events: Option<mpsc::Sender<Event>>,
    /// The connection's account of its grants.
    account: Account,
}

/// The connection's account of its grants (see [`AnsweredGrants`]): kept apart from the
/// decisions it audits, from what it sees happen.
#[derive(Default)]
struct Account {
    /// Grants that reached the boundary and were not released, by token, at most
    /// [`ANSWERED_GRANTS_REMEMBERED`] but for cancelled and undelivered ones (a `Cancel`
    /// trails its answer by at most the requests in flight): past that, the oldest delivered
    /// one is forgotten.
    grants: std::collections::BTreeMap<Token, Entry>,
    /// The requests whose `Cancel` was read, newest last, at most
    /// [`ANSWERED_GRANTS_REMEMBERED`].
    cancels: std::collections::VecDeque<u64>,
}

/// A grant in the [`Account`].
struct Entry {
    key: Key,
    request_id: u64,
    /// Written to the connection while it was open.
    delivered: bool,
    /// Its request's `Cancel` was read: its client will never read it.
    cancelled: bool,
}

impl Account {
    fn reached_boundary(&mut self, request_id: u64, key: Key, token: Token) {
        let cancelled = self.cancels.contains(&request_id);
        let entry = Entry {
            key,
            request_id,
            delivered: false,
            cancelled,
        };
        self.grants.insert(token, entry);
    }

    fn cancel_read(&mut self, request_id: u64) {
        if self.cancels.len() >= ANSWERED_GRANTS_REMEMBERED {
            self.cancels.pop_front();
        }
        self.cancels.push_back(request_id);
        (self.grants.values_mut())
            .filter(|e| e.request_id == request_id)
            .for_each(|e| e.cancelled = true);
    }

    fn written(&mut self, token: Token, open: bool) {
        let Some(entry) = self.grants.get_mut(&token) else {
            return;
        };
        if !open {
            return;
        }
        entry.delivered = true;
        if self.grants.len() > ANSWERED_GRANTS_REMEMBERED {
            let oldest = (self.grants.iter())
                .find(|(_, e)| e.delivered && !e.cancelled)
                .map(|(token, _)| *token);
            oldest.map(|token| self.grants.remove(&token));
        }
    }

    fn released(&mut self, token: Token) {
        self.grants.remove(&token);
    }

    /// A grant whose call was cancelled and that is still held.
    fn cancelled_held(&self) -> Option<(Token, &Entry)> {
        (self.grants.iter())
            .find(|(_, e)| e.cancelled)
            .map(|(token, e)| (*token, e))
    }

    /// A grant neither delivered nor released.
    fn undelivered(&self) -> Option<(Token, &Entry)> {
        (self.grants.iter())
            .find(|(_, e)| !e.delivered)
            .map(|(token, e)| (*token, e))
    }
}

/// A grant the connection recorded, and whether its answer was written.
struct Recorded {
    request_id: u64,
    key: Key,
    token: Token,
    written: bool,
}

impl Drop for AnsweredState {
    /// The connection and all its handlers are gone: a recorded grant whose answer was never
    /// written (the connection ended on an error with answers queued, or tarpc dropped one
    /// whose deadline passed) is released; and the account is settled.
    fn drop(&mut self) {
        let Some(events) = self.events.take() else {
            return;
        };
        let cancelled_held = (self.account.cancelled_held()).map(|(token, e)| {
            format!(
                "the server kept grant token {token} of key {:?} after it read the Cancel of \
                 its call (its client never reads it; a phantom lock until the connection \
                 ended)",
                e.key
            )
        });
        for recorded in std::mem::take(&mut self.grants) {
            if recorded.written {
                continue;
            }
            let Recorded { key, token, .. } = recorded;
            crate::probe!("grant-unwritten-at-connection-end");
            debug!(key = %key, token, "a grant never written as its connection ended");
            self.account.released(token);
            report_orphan(&events, key, token);
        }
        let undelivered = (self.account.undelivered()).map(|(token, e)| {
            format!(
                "the server's client connection ended with grant token {token} of key {:?} \
                 neither written to it while it was open nor released as an orphan (a \
                 phantom lock: nobody holds it, and it stays until its lease ends)",
                e.key
            )
        });
        let Some(reason) = cancelled_held.or(undelivered) else {
            return;
        };
        tracing::error!("{reason}");
        if crate::sys::simulated() {
            let _ = events.try_send(Event::ContractBroken { reason });
        }
    }
}

impl AnsweredGrants {
    fn lock(&self) -> std::sync::MutexGuard<'_, AnsweredState> {
        // Poisoned only if a task panicked holding it; the lists are still valid.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a grant answered to request `request_id`; returns it as an orphan when that
    /// request was cancelled already.
    fn record(&self, request_id: u64, key: Key, token: Token) -> Option<(Key, Token)> {
        let mut state = self.lock();
        if let Some(at) = state.cancelled.iter().position(|id| *id == request_id) {
            state.cancelled.remove(at);
            crate::probe!("cancel-read-before-grant-recorded");
            return Some((key, token));
        }
        if state.grants.len() >= ANSWERED_GRANTS_REMEMBERED {
            state.grants.pop_front();
        }
        state.grants.push_back(Recorded {
            request_id,
            key,
            token,
            written: false,
        });
        None
    }

    /// A grant to request `request_id` reached the `Serve` boundary: it enters the account.
    fn reached_boundary(&self, request_id: u64, key: Key, token: Token) {
        (self.lock().account).reached_boundary(request_id, key, token);
    }

    /// Releases a grant of this connection's as an orphan; it leaves the account.
    fn orphan(&self, events: &mpsc::Sender<Event>, key: Key, token: Token) {
        self.lock().account.released(token);
        report_orphan(events, key, token);
    }

    /// tarpc writes the answer `token` to request `request_id`, with the connection `open`
    /// or not. Written to an open connection, the grant leaves the account; written after
    /// the connection's end it reaches nobody, and is returned to be released. `decided` is
    /// what the connection took `open` for (the mutant `grant-written-after-end-kept` takes
    /// every write for one to an open connection; the account still sees the truth).
    fn written(
        &self,
        request_id: u64,
        token: Token,
        open: bool,
        decided: bool,
    ) -> Option<(Key, Token)> {
        let mut state = self.lock();
        state.account.written(token, open);
        let at =
            (state.grants.iter()).position(|g| g.request_id == request_id && g.token == token)?;
        if decided {
            state.grants[at].written = true;
            return None;
        }
        state.grants.remove(at).map(|g| (g.key, g.token))
    }

    /// Request `request_id` was cancelled: returns its grant if one was recorded, and
    /// otherwise remembers the cancellation for [`AnsweredGrants::record`].
    fn cancel(&self, request_id: u64) -> Option<(Key, Token)> {
        let mut state = self.lock();
        if let Some(at) = state.grants.iter().position(|g| g.request_id == request_id) {
            return state.grants.remove(at).map(|g| (g.key, g.token));
        }
        if state.forget_cancels {
            return None;
        }
        if state.cancelled.len() >= ANSWERED_GRANTS_REMEMBERED {
            state.cancelled.pop_front();
        }
        state.cancelled.push_back(request_id);
        None
    }
}

/// Reports a grant nobody reads as [`Event::Orphaned`], never blocking: with the queue full,
/// from a task of its own.
fn report_orphan(events: &mpsc::Sender<Event>, key: Key, token: Token) {
    let orphan = Event::Orphaned { key, token };
    if let Err(mpsc::error::TrySendError::Full(orphan)) = events.try_send(orphan)
        && let Ok(runtime) = tokio::runtime::Handle::try_current()
    {
        let events = events.clone();
        runtime.spawn(async move {
            let _ = events.send(orphan).await;
        });
    }
}

/// A transport that sees a grant its client never read: tarpc's client sends `Cancel` for a
/// request only while the request is still in flight at the client, that is before its
/// answer reached the caller, so a `Cancel` for a request whose handler answered `Granted`
/// says the caller dropped the call with the grant not yet read (its deadline passed, or it
/// stopped waiting). Whether tarpc had written the answer or not (a `Cancel` read first makes
/// `BaseChannel` drop the answer unwritten), nobody will release that grant: it is reported
/// as [`Event::Orphaned`] and released like a grant to a closed connection (DESIGN.md
/// "Phantom locks"). lockd's own client also sends an abandon for it (`client.rs`); this
/// covers a caller that drops the call and never runs another op, and clients that are not
/// ours. A `Cancel` that comes while the handler still runs is the handler's (its
/// [`GoneGuard`]), unless the handler had already passed its last abort point: its grant,
/// recorded after the `Cancel`, is then reported by [`CheckedServe`] ([`AnsweredGrants`]).
struct CancelWatch<T> {
    inner: T,
    events: mpsc::Sender<Event>,
    answered: AnsweredGrants,
    /// The mutant `cancel-not-orphaned` (`crate::bugs`): such a grant is left alone.
    ignore_cancelled: bool,
    /// The connection's end as [`EofNotify`] tells it (none in some unit tests: open).
    closed: Option<watch::Receiver<bool>>,
    /// The mutant `grant-written-after-end-kept` (`crate::bugs`): every write counts as
    /// delivered.
    end_ignored_at_write: bool,
}

impl<T> CancelWatch<T> {
    fn new(inner: T, events: mpsc::Sender<Event>, answered: AnsweredGrants) -> Self {
        CancelWatch {
            inner,
            events,
            answered,
            ignore_cancelled: false,
            closed: None,
            end_ignored_at_write: false,
        }
    }

    /// Notes a message from the client; a cancelled grant becomes an orphan.
    fn saw(&mut self, message: &tarpc::ClientMessage<crate::rpc::LockServiceRequest>) {
        let tarpc::ClientMessage::Cancel { request_id, .. } = message else {
            return;
        };
        self.answered.lock().account.cancel_read(*request_id);
        let Some((key, token)) = self.answered.cancel(*request_id) else {
            return;
        };
        crate::probe!("grant-cancelled-after-answer");
        debug!(key = %key, token, "a grant's call was cancelled after it was answered");
        if self.ignore_cancelled {
            return;
        }
        self.answered.orphan(&self.events, key, token);
    }

    /// Notes an answer tarpc writes: a grant written after the connection's end reaches
    /// nobody (tarpc reads before it writes in each turn, and goes on writing while requests
    /// are in flight), so it is released.
    fn writes(&self, response: &tarpc::Response<crate::rpc::LockServiceResponse>) {
        let Ok(crate::rpc::LockServiceResponse::Acquire(Response::Granted { token })) =
            &response.message
        else {
            return;
        };
        let open = (self.closed.as_ref()).is_none_or(|closed| !*closed.borrow());
        let open_as_decided = open || self.end_ignored_at_write;
        if let Some((key, token)) =
            (self.answered).written(response.request_id, *token, open, open_as_decided)
        {
            crate::probe!("grant-written-after-connection-end");
            debug!(key = %key, token, "a grant's answer was written after its connection ended");
            self.answered.orphan(&self.events, key, token);
        }
    }
}

impl<T, E> Stream for CancelWatch<T>
where
    T: Stream<Item = Result<tarpc::ClientMessage<crate::rpc::LockServiceRequest>, E>> + Unpin,
{
    type Item = T::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if let Poll::Ready(Some(Ok(message))) = &polled {
            self.saw(message);
        }
        polled
    }
}

impl<T> Sink<tarpc::Response<crate::rpc::LockServiceResponse>> for CancelWatch<T>
where
    T: Sink<tarpc::Response<crate::rpc::LockServiceResponse>> + Unpin,
{
    type Error = T::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_ready(cx)
    }

    fn start_send(
        mut self: Pin<&mut Self>,
        item: tarpc::Response<crate::rpc::LockServiceResponse>,
    ) -> Result<(), T::Error> {
        self.writes(&item);
        Pin::new(&mut self.inner).start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), T::Error>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// Reports a request whose client left before its answer reached it, when dropped while
/// armed (the handler was aborted by a cancel or its deadline, or gave up because the
/// connection closed). It closes the answer channel first, so the answer is either already
/// in it (a grant then becomes [`Event::Orphaned`]) or can no longer be sent (the core
/// thread sees the failed send), and otherwise sends [`Event::Gone`].
struct GoneGuard {
    id: RequestId,
    events: mpsc::Sender<Event>,
    armed: bool,
    answer: oneshot::Receiver<Response>,
    key: Option<Key>,
    /// An answer taken from the core that cannot be delivered (the connection had closed).
    undelivered: Option<Response>,
}

impl GoneGuard {
    /// The event to report on drop, if any.
    fn departure(&mut self) -> Option<Event> {
        if !self.armed {
            return None;
        }
        self.answer.close();
        let answer = match self.undelivered.take() {
            Some(answer) => Ok(answer),
            None => self.answer.try_recv(),
        };
        match answer {
            Ok(Response::Granted { token }) => Some(Event::Orphaned {
                key: self.key.take()?,
                token,
            }),
            // Answered but never delivered: nothing was granted, nothing to undo.
            Ok(_) => None,
            Err(_) => Some(Event::Gone { id: self.id }),
        }
    }
}

impl Drop for GoneGuard {
    fn drop(&mut self) {
        let Some(event) = self.departure() else {
            return;
        };
        debug!(request = self.id.0, ?event, "client gone before its answer");
        match self.events.try_send(event) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(event)) => {
                // Never block in drop; the queue is bounded, so the departure waits in a
                // task of its own (there is at most one per open request).
                let events = self.events.clone();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        let _ = events.send(event).await;
                    });
                }
            }
        }
    }
}

/// The `LockService`: forwards each request to the core and waits for its answer.
#[derive(Clone)]
struct LockServer {
    events: mpsc::Sender<Event>,
    /// The mutant `grant-to-closed-connection` (`crate::bugs`).
    deliver_to_closed: bool,
    next_id: Arc<AtomicU64>,
    closed: watch::Receiver<bool>,
}

impl LockServer {
    async fn call(self, request: ClientRequest) -> Response {
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let (reply, answer) = oneshot::channel();
        let key = match &request {
            ClientRequest::Acquire { key, .. } => Some(key.clone()),
            ClientRequest::Release { .. }
            | ClientRequest::Abandon { .. }
            | ClientRequest::RegisterSession { .. } => None,
        };
        let mut guard = GoneGuard {
            id,
            events: self.events.clone(),
            armed: false,
            answer,
            key,
            undelivered: None,
        };
        let event = Event::Request { id, request, reply };
        if self.events.send(event).await.is_err() {
            return unknown("the node is shutting down");
        }
        guard.armed = true;
        if crate::buggify!("server-wait-late") {
            // The handler comes back to its request late: the answer and the end of the
            // connection may then both be ready when it looks.
            let ms = crate::buggify::between(1, 100);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let mut closed = self.closed;
        let answered = tokio::select! {
            biased;
            answer = &mut guard.answer => Some(answer),
            _ = closed.wait_for(|closed| *closed) => None,
        };
        if matches!(answered, Some(Ok(Response::Granted { .. }))) && *closed.borrow() {
            crate::probe!("grant-ready-as-connection-closed");
        }
        match answered {
            // The answer and the end of the connection may be ready at once (the select
            // prefers the answer): an answer to a closed connection never reaches its client,
            // so a grant in it is a phantom lock like one whose client left first.
            Some(Ok(answer)) if *closed.borrow() && !self.deliver_to_closed => {
                guard.undelivered = Some(answer);
                unknown("the client connection closed")
            }
            Some(answer) => {
                guard.armed = false;
                answer.unwrap_or_else(|_| unknown("the core dropped the request"))
            }
            // The guard reports the departure as this returns.
            None => unknown("the client connection closed"),
        }
    }

    /// [`LockServer::call`], given up after `timeout_ms` on this node's clock (tokio's, the
    /// simulator's when simulated): dropping the call reports the departure, as when the
    /// client cancels.
    async fn call_within(self, timeout_ms: u64, request: ClientRequest) -> Response {
        if timeout_ms > CLIENT_TIMEOUT_MS_MAX {
            return Response::Invalid {
                reason: format!(
                    "timeout_ms {timeout_ms} is more than {CLIENT_TIMEOUT_MS_MAX}, the longest a node works on one request"
                ),
            };
        }
        let timeout_ms = if crate::buggify!("server-short-deadline") {
            crate::buggify::between(1, timeout_ms.min(200))
        } else {
            timeout_ms
        };
        let timeout = Duration::from_millis(timeout_ms);
        match tokio::time::timeout(timeout, self.call(request)).await {
            Ok(response) => response,
            Err(_) => unknown("the caller's timeout passed before an answer"),
        }
    }

    async fn ask<T>(&self, event: impl FnOnce(oneshot::Sender<T>) -> Event) -> Option<T> {
        let (reply, answer) = oneshot::channel();
        self.events.send(event(reply)).await.ok()?;
        answer.await.ok()
    }
}

fn unknown(reason: &str) -> Response {
    Response::Unknown {
        reason: reason.to_owned(),
    }
}

impl LockService for LockServer {
    async fn acquire(
        self,
        _: context::Context,
        key: Key,
        lease_ms: u64,
        wait_ms: u64,
        origin: Option<Origin>,
        timeout_ms: u64,
    ) -> Response {
        let request = ClientRequest::Acquire {
            key,
            lease_ms,
            wait_ms,
            origin,
        };
        self.call_within(timeout_ms, request).await
    }

    async fn release(
        self,
        _: context::Context,
        key: Key,
        token: Token,
        origin: Option<Origin>,
        timeout_ms: u64,
    ) -> Response {
        let request = ClientRequest::Release { key, token, origin };
        self.call_within(timeout_ms, request).await
    }

    async fn abandon(
        self,
        _: context::Context,
        key: Key,
        request: u64,
        origin: Option<Origin>,
        timeout_ms: u64,
    ) -> Response {
        let request = ClientRequest::Abandon {
            key,
            request,
            origin,
        };
        self.call_within(timeout_ms, request).await
    }

    async fn register_session(self, _: context::Context, label: u64, timeout_ms: u64) -> Response {
        let request = ClientRequest::RegisterSession { label };
        self.call_within(timeout_ms, request).await
    }

    async fn status(self, _: context::Context) -> NodeStatus {
        match self.ask(|reply| Event::Status { reply }).await {
            Some(status) => status,
            // Only when the core thread is gone, and then the process is exiting.
            None => future::pending().await,
        }
    }
}

/// What a connection checks of every answer its handlers give, outside the handlers: a
/// grant is never handed to a connection already known to be closed (DESIGN.md "Phantom
/// locks": such a grant reaches nobody and must be released as an orphan). The handler
/// looks at the connection's end after the answer came (`LockServer::call`); a mistake there
/// hands the grant on and keeps a phantom lock until its lease runs out, which no history
/// can tell from a grant that crossed its client's departure on the wire. The check sits at
/// the `Serve` boundary, where the handler's answer leaves it in the same poll in which the
/// handler decided, so a correct handler never trips it. Under the simulator a broken
/// contract stops the node (`Event::ContractBroken`: node health names it); outside it is an
/// error line only.
#[derive(Clone)]
struct Checked {
    closed: watch::Receiver<bool>,
    events: mpsc::Sender<Event>,
    /// The grants answered on this connection, for [`CancelWatch`].
    answered: AnsweredGrants,
}

impl Checked {
    /// `inner` serving the request of tarpc id `request_id`.
    fn wrap<S>(self, request_id: u64, inner: S) -> CheckedServe<S> {
        CheckedServe {
            inner,
            checked: self,
            request_id,
        }
    }

    /// Whether `response` breaks the contract (and reports it).
    fn check(&self, response: &crate::rpc::LockServiceResponse) -> bool {
        let crate::rpc::LockServiceResponse::Acquire(Response::Granted { token }) = response else {
            return false;
        };
        if !*self.closed.borrow() {
            return false;
        }
        let reason = format!(
            "the server handed grant token {token} to a client connection it knew was closed \
             (a phantom lock: nobody gets it, and it is not released as an orphan)"
        );
        tracing::error!(token, "{reason}");
        if crate::sys::simulated() {
            let events = self.events.clone();
            tokio::spawn(async move {
                let _ = events.send(Event::ContractBroken { reason }).await;
            });
        }
        true
    }
}

/// A `Serve` that runs `inner` for one request, [`Checked::check`]s its answer, and records
/// a grant in it for [`CancelWatch`] (or reports it orphaned if its `Cancel` came first).
#[derive(Clone)]
struct CheckedServe<S> {
    inner: S,
    checked: Checked,
    request_id: u64,
}

impl<S> tarpc::server::Serve for CheckedServe<S>
where
    S: tarpc::server::Serve<
            Req = crate::rpc::LockServiceRequest,
            Resp = crate::rpc::LockServiceResponse,
        >,
{
    type Req = S::Req;
    type Resp = S::Resp;

    async fn serve(
        self,
        ctx: context::Context,
        req: Self::Req,
    ) -> Result<Self::Resp, tarpc::ServerError> {
        let key = match &req {
            crate::rpc::LockServiceRequest::Acquire { key, .. } => Some(key.clone()),
            _ => None,
        };
        let response = self.inner.serve(ctx, req).await;
        let Ok(answer) = &response else {
            return response;
        };
        // The handler's contract, in the poll in which it decided. A grant it breaks goes
        // to a closed connection, which `settle` releases (a connection never reopens).
        self.checked.check(answer);
        let (Some(key), crate::rpc::LockServiceResponse::Acquire(Response::Granted { token })) =
            (key, answer)
        else {
            return response;
        };
        (self.checked.answered).reached_boundary(self.request_id, key.clone(), *token);
        let mut grant = AnsweredGrant {
            checked: &self.checked,
            request_id: self.request_id,
            grant: Some((key, *token)),
        };
        if crate::buggify!("serve-boundary-yield") {
            // What lockd's other worker thread may do meanwhile: read a `Cancel` of this
            // request (tarpc then aborts this future here, and `grant` settles on drop, as
            // the answer would be dropped unwritten), or the end of the connection.
            let ms = crate::buggify::between(1, 20);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        grant.settle();
        if crate::buggify!("serve-write-yield") {
            // What lockd's other worker thread may do before tarpc's task writes the answer:
            // read the end of the connection (the answer is then written after it, or never).
            let ms = crate::buggify::between(1, 20);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        response
    }
}

/// A grant a handler answered, on its way out of the `Serve` boundary: settled once, when it
/// leaves ([`AnsweredGrant::settle`]) or when the request is aborted before (drop).
struct AnsweredGrant<'a> {
    checked: &'a Checked,
    request_id: u64,
    grant: Option<(Key, Token)>,
}

impl AnsweredGrant<'_> {
    /// Records the grant for [`CancelWatch`], or releases it as an orphan if its connection
    /// is closed or its `Cancel` was read already.
    fn settle(&mut self) {
        let Some((key, token)) = self.grant.take() else {
            return;
        };
        if *self.checked.closed.borrow() {
            // The connection is gone: this answer is never written. The check names a
            // handler that saw the connection closed and returned the grant anyway; on
            // `lockd`'s two workers the connection can also end after the handler looked.
            // Either way nobody else will release it.
            (self.checked.answered).orphan(&self.checked.events, key, token);
        } else if let Some((key, token)) =
            (self.checked.answered).record(self.request_id, key, token)
        {
            debug!(key = %key, token, "a grant's call was cancelled as it was answered");
            (self.checked.answered).orphan(&self.checked.events, key, token);
        }
    }
}

impl Drop for AnsweredGrant<'_> {
    fn drop(&mut self) {
        self.settle();
    }
}

/// Serves one request of a client connection: its handler with the connection's checks.
fn serve_request(
    request: tarpc::server::InFlightRequest<
        crate::rpc::LockServiceRequest,
        crate::rpc::LockServiceResponse,
    >,
    checked: &Checked,
    server: &LockServer,
) -> impl Future<Output = ()> + use<> {
    let id = request.get().id;
    request.execute(checked.clone().wrap(id, server.clone().serve()))
}

/// One client connection's parts: its transport, watched for a `Cancel` of an answered
/// grant and for its end; the checks of its answers; and its handler.
fn connection<T>(
    transport: T,
    events: &mpsc::Sender<Event>,
    bugs: crate::bugs::BugSet,
    next_id: &Arc<AtomicU64>,
) -> (EofNotify<CancelWatch<T>>, Checked, LockServer) {
    let answered = AnsweredGrants::default();
    {
        let mut state = answered.lock();
        state.forget_cancels = bugs.contains(crate::bugs::Bug::CancelCrossingAnswerForgotten);
        state.events = Some(events.clone());
    }
    let watched = CancelWatch {
        ignore_cancelled: bugs.contains(crate::bugs::Bug::CancelNotOrphaned),
        end_ignored_at_write: bugs.contains(crate::bugs::Bug::GrantWrittenAfterEndKept),
        ..CancelWatch::new(transport, events.clone(), answered.clone())
    };
    let deliver_to_closed = bugs.contains(crate::bugs::Bug::GrantToClosedConnection);
    let (mut transport, closed) = EofNotify::new(watched);
    transport.unseen = bugs.contains(crate::bugs::Bug::ConnectionEndUnseen);
    transport.inner.closed = Some(closed.clone());
    let checked = Checked {
        closed: closed.clone(),
        events: events.clone(),
        answered,
    };
    let server = LockServer {
        deliver_to_closed,
        events: events.clone(),
        next_id: next_id.clone(),
        closed,
    };
    (transport, checked, server)
}

pub(super) async fn serve_clients(
    listener: TcpListener,
    events: mpsc::Sender<Event>,
    bugs: crate::bugs::BugSet,
) {
    let next_id = Arc::new(AtomicU64::new(1));
    let slots = Arc::new(Semaphore::new(CLIENT_CONNECTIONS_MAX));
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(e) => {
                warn!(error = %e, "client accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            warn!(
                bound = CLIENT_CONNECTIONS_MAX,
                "too many client connections; one closed"
            );
            continue;
        };
        let transport = served_transport(stream);
        let (transport, checked, server) = connection(transport, &events, bugs, &next_id);
        tokio::spawn(async move {
            BaseChannel::with_defaults(transport)
                .max_concurrent_requests(CLIENT_REQUESTS_PER_CONNECTION_MAX)
                .requests()
                .take_while(|request| {
                    if let Err(e) = request {
                        // The whole chain (tarpc's wording): the cause is in the sources,
                        // e.g. "frame size too big", which the soak's log scan looks for.
                        let mut text = e.to_string();
                        let mut source = std::error::Error::source(e);
                        while let Some(cause) = source {
                            text.push_str(": ");
                            text.push_str(&cause.to_string());
                            source = cause.source();
                        }
                        warn!("Requests stream errored out: {text}");
                    }
                    future::ready(request.is_ok())
                })
                .filter_map(|request| future::ready(request.ok()))
                .for_each(|request| {
                    tokio::spawn(serve_request(request, &checked, &server));
                    future::ready(())
                })
                .await;
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(events: &mpsc::Sender<Event>) -> (GoneGuard, oneshot::Sender<Response>) {
        let (reply, answer) = oneshot::channel();
        let guard = GoneGuard {
            id: RequestId(7),
            events: events.clone(),
            armed: true,
            answer,
            key: Some("k".to_owned()),
            undelivered: None,
        };
        (guard, reply)
    }

    #[tokio::test]
    async fn a_grant_answered_as_the_connection_closes_is_released_not_delivered() {
        // Review defect "requests whose client leaves": the handler's select prefers the
        // answer, so a grant that came in the same turn as the end of the connection was
        // handed to a dead connection and kept as a phantom lock until its lease ran out.
        let (events, mut inbox) = mpsc::channel(8);
        let (close, closed) = watch::channel(false);
        let server = LockServer {
            deliver_to_closed: false,
            events,
            next_id: Arc::new(AtomicU64::new(1)),
            closed,
        };
        let request = ClientRequest::Acquire {
            key: "k".to_owned(),
            lease_ms: 20_000,
            wait_ms: 0,
            origin: None,
        };
        let handler = tokio::spawn(server.call(request));
        let Some(Event::Request { reply, .. }) = inbox.recv().await else {
            panic!("the handler should forward the request to the core");
        };
        // Both in one turn: the connection ends and the core answers.
        close.send_replace(true);
        reply.send(Response::Granted { token: 11 }).unwrap();
        let response = handler.await.unwrap();
        assert!(
            matches!(response, Response::Unknown { .. }),
            "a closed connection gets no grant: {response:?}"
        );
        match inbox.try_recv() {
            Ok(Event::Orphaned { key, token }) => assert_eq!((key.as_str(), token), ("k", 11)),
            other => panic!("expected the grant reported as orphaned, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_cancel_after_the_grant_was_answered_releases_it_as_an_orphan() {
        // The deadline defect (issue 24 review): a caller that stops waiting while its grant
        // is on the way back never reads it. tarpc sends `Cancel` only for a call still in
        // flight at the client, so a `Cancel` for a request whose handler answered a grant
        // proves it; a `Cancel` for anything else is not this watch's business.
        let (events, mut inbox) = mpsc::channel(8);
        let answered = AnsweredGrants::default();
        let mut watch = CancelWatch::new((), events, answered.clone());
        let cancel = |request_id| tarpc::ClientMessage::Cancel {
            trace_context: Default::default(),
            request_id,
        };
        answered.record(1, "a".to_owned(), 7);
        answered.record(4, "d".to_owned(), 8);
        // 2 was answered Busy, 3 is still being handled: neither is recorded.
        for id in [3, 2, 1] {
            watch.saw(&cancel(id));
        }
        match inbox.try_recv() {
            Ok(Event::Orphaned { key, token }) => assert_eq!((key.as_str(), token), ("a", 7)),
            other => panic!("expected the cancelled grant as an orphan, got {other:?}"),
        }
        assert!(inbox.try_recv().is_err(), "only the cancelled grant");
        watch.saw(&cancel(1));
        assert!(inbox.try_recv().is_err(), "a cancel is acted on once");
        assert_eq!(
            answered.cancel(4),
            Some(("d".to_owned(), 8)),
            "4 was read: kept"
        );
    }

    #[tokio::test]
    async fn a_grant_whose_cancel_comes_before_it_is_written_is_released_as_an_orphan() {
        // The deadline defect, the server's half (`CancelWatch`). The handler got `Granted`
        // from the core and returned (its `GoneGuard` disarmed); the answer waits in tarpc's
        // response queue. The client stops waiting and its `Cancel` is read before the
        // channel writes the answer: tarpc's `BaseChannel` removes the request, then drops
        // its answer unwritten ("the request isn't tracked anymore"), and the handler, done,
        // is not aborted. `CancelWatch` saw a `Cancel` before any answer was sent and leaves
        // it to the handler. Nobody releases the grant: it keeps its key, known to nobody,
        // for the whole lease. (The same when tarpc's own deadline for the request expires
        // in that window: `BaseChannel` drops the answer too.)
        let Granted {
            mut client_side,
            mut requests,
            mut inbox,
            ..
        } = granted_to_request_1().await;
        // The handler has returned; its answer is queued. The client's cancel comes in.
        let cancel = tarpc::ClientMessage::Cancel {
            trace_context: Default::default(),
            request_id: 1,
        };
        client_side.send(cancel).await.unwrap();
        // One turn of the channel: it reads the cancel, then takes the answer off its queue.
        assert!(futures::poll!(requests.next()).is_pending());
        assert!(
            futures::poll!(client_side.next()).is_pending(),
            "tarpc writes no answer for a cancelled request"
        );
        match inbox.try_recv() {
            Ok(Event::Orphaned { key, token }) => assert_eq!((key.as_str(), token), ("k", 7)),
            other => panic!(
                "the grant went to nobody and nothing releases it (expected it orphaned): \
                 {other:?}"
            ),
        }
    }

    /// A transport whose read half ends when `ended` is set, while its write half goes on
    /// taking answers: a socket whose client died, before a write finds out.
    struct ReadEnds<T> {
        inner: T,
        ended: Arc<std::sync::atomic::AtomicBool>,
    }

    impl<T: Stream + Unpin> Stream for ReadEnds<T> {
        type Item = T::Item;

        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T::Item>> {
            if self.ended.load(Ordering::Relaxed) {
                return Poll::Ready(None);
            }
            Pin::new(&mut self.inner).poll_next(cx)
        }
    }

    impl<T: Sink<S> + Unpin, S> Sink<S> for ReadEnds<T> {
        type Error = T::Error;

        fn poll_ready(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Result<(), T::Error>> {
            Pin::new(&mut self.inner).poll_ready(cx)
        }

        fn start_send(mut self: Pin<&mut Self>, item: S) -> Result<(), T::Error> {
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

    type ClientSide = tarpc::transport::channel::UnboundedChannel<
        tarpc::Response<crate::rpc::LockServiceResponse>,
        tarpc::ClientMessage<crate::rpc::LockServiceRequest>,
    >;

    type ServerSide = tarpc::transport::channel::UnboundedChannel<
        tarpc::ClientMessage<crate::rpc::LockServiceRequest>,
        tarpc::Response<crate::rpc::LockServiceResponse>,
    >;

    type GrantedChannel = BaseChannel<
        crate::rpc::LockServiceRequest,
        crate::rpc::LockServiceResponse,
        EofNotify<CancelWatch<ReadEnds<ServerSide>>>,
    >;

    /// A connection over a channel whose read half ends when `ended` is set, after its
    /// handler returned request 1's answer: an acquire of "k" the core granted token 7.
    struct Granted {
        client_side: ClientSide,
        ended: Arc<std::sync::atomic::AtomicBool>,
        requests: Pin<Box<tarpc::server::Requests<GrantedChannel>>>,
        checked: Checked,
        server: LockServer,
        inbox: mpsc::Receiver<Event>,
    }

    async fn granted_to_request_1() -> Granted {
        let (events, mut inbox) = mpsc::channel(8);
        let (mut client_side, server_side) = tarpc::transport::channel::unbounded();
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let server_side = ReadEnds {
            inner: server_side,
            ended: ended.clone(),
        };
        let (transport, checked, server) = connection(
            server_side,
            &events,
            crate::bugs::BugSet::NONE,
            &Arc::new(AtomicU64::new(1)),
        );
        let mut requests = Box::pin(BaseChannel::with_defaults(transport).requests());
        let acquire = tarpc::ClientMessage::Request(tarpc::Request {
            context: context::current(),
            id: 1,
            message: crate::rpc::LockServiceRequest::Acquire {
                key: "k".to_owned(),
                lease_ms: 60_000,
                wait_ms: 0,
                origin: None,
                timeout_ms: 10_000,
            },
        });
        client_side.send(acquire).await.unwrap();
        let request = requests.next().await.unwrap().unwrap();
        let handler = tokio::spawn(serve_request(request, &checked, &server));
        let Some(Event::Request { reply, .. }) = inbox.recv().await else {
            panic!("the handler should forward the request to the core");
        };
        reply.send(Response::Granted { token: 7 }).unwrap();
        handler.await.unwrap();
        Granted {
            client_side,
            ended,
            requests,
            checked,
            server,
            inbox,
        }
    }

    /// The settle gap (2026-12-07). A handler returned its grant (token 7 of key "k") with
    /// the connection open, and the grant was recorded for a later `Cancel`; then the client
    /// died before the connection's task wrote the answer, and `die` plays that death on
    /// the client's side. The answer reaches nobody and no `Cancel` will ever come. Returns
    /// what the core's inbox holds once the connection and its handlers are gone.
    async fn grant_recorded_then_client_dies(
        die: impl FnOnce(&mut ClientSide, &Arc<std::sync::atomic::AtomicBool>),
    ) -> Vec<Event> {
        let Granted {
            mut client_side,
            ended,
            mut requests,
            checked,
            server,
            mut inbox,
        } = granted_to_request_1().await;
        assert!(
            inbox.try_recv().is_err(),
            "recorded, not released: the connection was open"
        );
        die(&mut client_side, &ended);
        // The channel's next turn reads the end, then tries to write the answer.
        let _ = futures::poll!(requests.next());
        drop((requests, checked, server, client_side));
        let mut inbox_now = Vec::new();
        while let Ok(event) = inbox.try_recv() {
            inbox_now.push(event);
        }
        inbox_now
    }

    fn only_orphan_k7(events: &[Event]) -> bool {
        matches!(events, [Event::Orphaned { key, token: 7 }] if key == "k")
    }

    #[tokio::test]
    async fn a_grant_recorded_before_its_connection_ended_and_written_after_is_released() {
        // tarpc reads before it writes in each turn, and goes on writing while requests are
        // in flight: the answer is written, to a connection whose client is gone.
        let events = grant_recorded_then_client_dies(|_, ended| {
            ended.store(true, Ordering::Relaxed);
        })
        .await;
        assert!(
            only_orphan_k7(&events),
            "the grant's answer went to a closed connection and nothing released it \
             (expected it orphaned once): {events:?}"
        );
    }

    #[tokio::test]
    async fn a_grant_recorded_before_its_connection_ended_and_never_written_is_released() {
        // The write fails before the answer is handed to it: the connection's task ends
        // with the answer unwritten.
        let events = grant_recorded_then_client_dies(|client_side, _| {
            let (dead, _) = tarpc::transport::channel::unbounded();
            drop(std::mem::replace(client_side, dead));
        })
        .await;
        assert!(
            only_orphan_k7(&events),
            "the connection ended with the grant's answer unwritten and nothing released it \
             (expected it orphaned once): {events:?}"
        );
    }

    /// A `Serve` that runs `inner` and then `meanwhile`, before its answer reaches the `Serve`
    /// boundary: what the connection's task, on another worker thread of `lockd`'s
    /// multi-threaded runtime, can do after a handler passed its last abort point.
    struct Meanwhile<S, F> {
        inner: S,
        meanwhile: F,
    }

    impl<S, F> tarpc::server::Serve for Meanwhile<S, F>
    where
        S: tarpc::server::Serve,
        F: FnOnce(),
    {
        type Req = S::Req;
        type Resp = S::Resp;

        async fn serve(
            self,
            ctx: context::Context,
            req: Self::Req,
        ) -> Result<Self::Resp, tarpc::ServerError> {
            let response = self.inner.serve(ctx, req).await;
            (self.meanwhile)();
            response
        }
    }

    #[test]
    fn a_grant_whose_request_is_aborted_before_it_leaves_the_boundary_is_still_settled() {
        // Under the simulator the interleaving point `serve-boundary-yield` waits between a
        // handler's grant and its record, and tarpc aborts the request there when it reads
        // its `Cancel`. On lockd's workers that abort cannot land there (no await), but the
        // `Cancel` can be read there all the same; so a grant dropped on its way out is
        // settled as if it had left: released when its `Cancel` came first, recorded for a
        // later one otherwise.
        let (events, mut inbox) = mpsc::channel(8);
        let (_close, closed) = watch::channel(false);
        let answered = AnsweredGrants::default();
        let checked = Checked {
            closed,
            events,
            answered: answered.clone(),
        };
        let on_the_way = |request_id, token| AnsweredGrant {
            checked: &checked,
            request_id,
            grant: Some(("k".to_owned(), token)),
        };

        assert_eq!(answered.cancel(1), None, "no grant recorded yet");
        drop(on_the_way(1, 7));
        match inbox.try_recv() {
            Ok(Event::Orphaned { key, token }) => assert_eq!((key.as_str(), token), ("k", 7)),
            other => panic!("the grant of a request cancelled first is an orphan: {other:?}"),
        }

        drop(on_the_way(2, 8));
        assert!(inbox.try_recv().is_err(), "nothing to release yet");
        assert_eq!(
            answered.cancel(2),
            Some(("k".to_owned(), 8)),
            "recorded for a later Cancel"
        );

        let mut settled = on_the_way(3, 9);
        settled.settle();
        drop(settled);
        assert_eq!(answered.cancel(3), Some(("k".to_owned(), 9)));
        assert_eq!(answered.cancel(3), None, "settled once, not again on drop");
    }

    /// Serves an acquire that the core grants (token 7 of key "k") and runs `meanwhile`, given
    /// the connection's close switch and its cancel watch, between the handler's return and
    /// the `Serve` boundary; checks that the handler answered the grant, and returns what the
    /// core's inbox holds after.
    async fn grant_then_meanwhile(
        meanwhile: impl FnOnce(&watch::Sender<bool>, &mut CancelWatch<()>),
    ) -> Result<Event, mpsc::error::TryRecvError> {
        let (events, mut inbox) = mpsc::channel(8);
        let (close, closed) = watch::channel(false);
        let answered = AnsweredGrants::default();
        let checked = Checked {
            closed: closed.clone(),
            events: events.clone(),
            answered: answered.clone(),
        };
        let server = LockServer {
            deliver_to_closed: false,
            events: events.clone(),
            next_id: Arc::new(AtomicU64::new(1)),
            closed,
        };
        let mut watch = CancelWatch::new((), events, answered);
        let other_worker = || meanwhile(&close, &mut watch);
        let handler = checked.wrap(
            1,
            Meanwhile {
                inner: server.serve(),
                meanwhile: other_worker,
            },
        );
        let acquire = crate::rpc::LockServiceRequest::Acquire {
            key: "k".to_owned(),
            lease_ms: 60_000,
            wait_ms: 0,
            origin: None,
            timeout_ms: 10_000,
        };
        let core = async {
            let Some(Event::Request { reply, .. }) = inbox.recv().await else {
                panic!("the handler should forward the request to the core");
            };
            reply.send(Response::Granted { token: 7 }).unwrap();
        };
        let (response, ()) = tokio::join!(
            tarpc::server::Serve::serve(handler, context::current(), acquire),
            core
        );
        assert!(
            matches!(
                response,
                Ok(crate::rpc::LockServiceResponse::Acquire(
                    Response::Granted { token: 7 }
                ))
            ),
            "the handler answered the grant: {response:?}"
        );
        inbox.try_recv()
    }

    #[tokio::test]
    async fn a_cancel_read_as_the_handler_returns_its_grant_releases_it_as_an_orphan() {
        // The deadline defect's server half (`CancelWatch`), on a multi-threaded runtime
        // (`lockd` runs two workers). The handler took `Granted` from the core and returned
        // (its `GoneGuard` disarmed); in that same poll, before the answer reached the
        // `Serve` boundary where it is recorded, the connection's task on the other worker
        // read the client's `Cancel`. `CancelWatch` found no answered grant and left it to
        // the handler, which no longer looks; `BaseChannel` then drops the answer unwritten
        // (the request is no longer tracked). Nobody releases the grant: its key stays held,
        // known to nobody, for the whole lease.
        let cancel = tarpc::ClientMessage::Cancel {
            trace_context: Default::default(),
            request_id: 1,
        };
        match grant_then_meanwhile(|_, watch| watch.saw(&cancel)).await {
            Ok(Event::Orphaned { key, token }) => assert_eq!((key.as_str(), token), ("k", 7)),
            other => panic!(
                "the grant's call was cancelled and its answer is never written, yet nothing \
                 releases it (expected it orphaned): {other:?}"
            ),
        }
    }

    #[tokio::test]
    async fn a_connection_that_ends_as_the_handler_returns_its_grant_releases_it_as_an_orphan() {
        // The twin of the cancel above, found by an experimental fault point that waits at
        // the `Serve` boundary under the simulator (2026-12-06): the handler took `Granted`
        // and returned (its guard disarmed, the connection open), and before the answer
        // reached the boundary the connection ended, on the other worker. The boundary saw
        // it closed, said so in a log line, and let the answer go to nobody: the key stayed
        // held, known to nobody, for the whole lease.
        let ended = |close: &watch::Sender<bool>, _: &mut CancelWatch<()>| {
            close.send_replace(true);
        };
        match grant_then_meanwhile(ended).await {
            Ok(Event::Orphaned { key, token }) => assert_eq!((key.as_str(), token), ("k", 7)),
            other => panic!(
                "the connection ended before the grant's answer could be written, yet \
                 nothing releases it (expected it orphaned): {other:?}"
            ),
        }
    }

    /// tarpc's `ClientMessage::Request` as bincode lays it out, with the deadline as sent: a
    /// duration from now (tarpc's `absolute_to_relative_time`), which any client chooses.
    #[derive(serde::Serialize)]
    enum WireMessage {
        Request(WireRequest),
    }

    #[derive(serde::Serialize)]
    struct WireRequest {
        context: WireContext,
        id: u64,
        message: crate::rpc::LockServiceRequest,
    }

    #[derive(serde::Serialize)]
    struct WireContext {
        deadline: Duration,
        trace_context: tarpc::trace::Context,
    }

    #[tokio::test]
    async fn a_request_whose_deadline_is_past_the_last_instant_is_answered_without_a_panic() {
        // Client input (issue 27 item 2: never a panic on it). tarpc reads a request's
        // deadline as `Instant::now() + duration`, and that addition panics when the sum is
        // past the last `Instant`: one frame from any client panicked the connection's task,
        // and `lockd` stops the node on any task's panic (exit 101). Here the node's client
        // port reads such a request, and its caller must get the core's answer.
        answered_through_the_client_port(Duration::from_secs(u64::MAX)).await;
    }

    #[tokio::test]
    async fn a_request_whose_deadline_is_years_ahead_is_answered_without_a_panic() {
        // The same with a deadline that is a valid `Instant` but beyond the ~2.2 years of
        // tarpc's deadline queue (tokio-util's `DelayQueue`), which panics "invalid deadline"
        // on insert.
        answered_through_the_client_port(Duration::from_secs(100_000_000)).await;
    }

    /// Sends an acquire with `deadline` to a client port, answers it `Busy` as the core, and
    /// checks that the caller gets that answer.
    async fn answered_through_the_client_port(deadline: Duration) {
        let (events, mut inbox) = mpsc::channel(8);
        let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_clients(listener, events, crate::bugs::BugSet::NONE));
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut client =
            crate::server::transport::<_, tarpc::Response<crate::rpc::LockServiceResponse>, _>(
                crate::sys::net::TcpStream::Tokio(stream),
            );
        let acquire = WireMessage::Request(WireRequest {
            context: WireContext {
                deadline,
                trace_context: Default::default(),
            },
            id: 1,
            message: crate::rpc::LockServiceRequest::Acquire {
                key: "k".to_owned(),
                lease_ms: 1_000,
                wait_ms: 0,
                origin: None,
                timeout_ms: 10_000,
            },
        });
        client.send(acquire).await.unwrap();
        let core = tokio::time::timeout(Duration::from_secs(5), inbox.recv()).await;
        let Ok(Some(Event::Request { reply, .. })) = core else {
            panic!("the request never reached the core (its connection's task died reading it)");
        };
        reply.send(Response::Busy).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), client.next()).await;
        assert!(
            matches!(
                &answer,
                Ok(Some(Ok(tarpc::Response {
                    request_id: 1,
                    message: Ok(crate::rpc::LockServiceResponse::Acquire(Response::Busy)),
                    ..
                })))
            ),
            "the caller gets the core's answer: {answer:?}"
        );
    }

    #[tokio::test]
    async fn a_grant_leaving_for_a_closed_connection_breaks_the_contract() {
        // The check outside the handler that makes the `grant-to-closed-connection` class
        // visible to the simulator: only a grant, and only to a connection known closed.
        let (events, _inbox) = mpsc::channel(8);
        let (close, closed) = watch::channel(false);
        let checked = Checked {
            closed,
            events,
            answered: AnsweredGrants::default(),
        };
        let granted = crate::rpc::LockServiceResponse::Acquire(Response::Granted { token: 4 });
        let busy = crate::rpc::LockServiceResponse::Acquire(Response::Busy);
        assert!(
            !checked.check(&granted),
            "an open connection may get its grant"
        );
        close.send_replace(true);
        assert!(checked.check(&granted), "a closed one may not");
        assert!(!checked.check(&busy), "nothing to lose in a Busy");
    }

    #[tokio::test]
    async fn a_dropped_handler_reports_gone_or_its_undelivered_grant() {
        // DESIGN.md "Phantom locks": a client gone before it got its answer must not keep
        // a lock, whether the core had answered yet or not.
        let (events, mut inbox) = mpsc::channel(8);
        let (unanswered, reply) = guard(&events);
        drop(unanswered);
        assert!(matches!(
            inbox.try_recv(),
            Ok(Event::Gone { id: RequestId(7) })
        ));
        assert!(
            reply.send(Response::Granted { token: 3 }).is_err(),
            "a later answer cannot be sent, so the core thread sees it undelivered"
        );

        let (granted, reply) = guard(&events);
        reply.send(Response::Granted { token: 9 }).unwrap();
        drop(granted);
        match inbox.try_recv() {
            Ok(Event::Orphaned { key, token }) => assert_eq!((key.as_str(), token), ("k", 9)),
            other => panic!("expected Orphaned, got {other:?}"),
        }

        let (busy, reply) = guard(&events);
        reply.send(Response::Busy).unwrap();
        drop(busy);
        let (mut delivered, _reply) = guard(&events);
        delivered.armed = false;
        drop(delivered);
        assert!(
            inbox.try_recv().is_err(),
            "nothing to undo for Busy or a delivered answer"
        );
    }
}
