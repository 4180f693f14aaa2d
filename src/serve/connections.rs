//! The server's connections: how many may be open, how long one may sit idle, take over a
//! request's head or send its body, and how they end when the server drains. axum's own `serve`
//! bounds none of these (an idle or half-sent connection stays open, and a drain waits for it
//! forever), so connections are accepted here and each is served by hyper's HTTP/1 in a task of
//! its own.
//!
//! A connection is, at any moment, *waiting* (no request being answered and nothing of the next
//! one received), *reading* (part of a request's head received) or *busy* (a request is being
//! answered, the answer's body included). A waiting connection is closed after the idle timeout,
//! a reading one the header timeout after its first byte arrived; a busy one is bounded by the
//! body timeout (its request's body must arrive within it) and by the run's own timeouts. At the
//! connection limit, a new connection closes the one waiting (or reading) longest — or, when every
//! connection is busy, waits for one to end — so a probe of `/healthz` is answered however many
//! idle connections a client opens. When the server drains, connections that are not busy are
//! closed at once and busy ones once their answer is sent.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::{BoxError, Router};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tower_service::Service as _;

/// How long accepting pauses after it failed (out of file descriptors, say), so that a failure
/// that lasts does not spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// The bounds on connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// How long a connection may wait with nothing received.
    pub idle: Duration,
    /// How long a request's head may take to arrive, from its first byte.
    pub header: Duration,
    /// How long a request's body may take to arrive, from the end of its head.
    pub body: Duration,
}

/// What a connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Reading,
    Busy,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// When the phase began.
    since: Instant,
    /// Requests whose answer is not yet sent (one, but for a client that pipelines).
    answering: usize,
    /// Closed to make room for another connection.
    evicted: bool,
    /// The server is draining.
    draining: bool,
}

/// One open connection, as its task and the accept loop see it.
#[derive(Debug)]
struct Connection {
    state: Mutex<State>,
    changed: Notify,
}

/// What the watch of a connection decided.
enum Verdict {
    /// Close it now.
    Close,
    /// Let the answer in progress finish, then close it.
    Finish,
}

impl Connection {
    fn new() -> Self {
        Connection {
            state: Mutex::new(State {
                phase: Phase::Waiting,
                since: Instant::now(),
                answering: 0,
                evicted: false,
                draining: false,
            }),
            changed: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the state with `change`, and wakes the connection's watch.
    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state());
        self.changed.notify_waiters();
    }

    /// Bytes arrived: a waiting connection is now reading a request's head.
    fn received(&self) {
        if self.state().phase != Phase::Waiting {
            return;
        }
        self.update(|state| {
            if state.phase == Phase::Waiting {
                state.phase = Phase::Reading;
                state.since = Instant::now();
            }
        });
    }

    /// A request's head arrived: busy until the returned guard (held by its answer's body) goes.
    fn busy(self: &Arc<Self>) -> Answering {
        self.update(|state| {
            state.answering = state.answering.saturating_add(1);
            state.phase = Phase::Busy;
        });
        Answering(Arc::clone(self))
    }

    /// Resolves when the connection should close, or (once) when it should finish its answer.
    async fn watch(&self, limits: &Limits, finishing: &mut bool) -> Verdict {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let deadline = {
                let state = self.state();
                if state.evicted || (state.draining && state.phase != Phase::Busy) {
                    return Verdict::Close;
                }
                if state.draining && !*finishing {
                    *finishing = true;
                    return Verdict::Finish;
                }
                match state.phase {
                    Phase::Waiting => state.since.checked_add(limits.idle),
                    Phase::Reading => state.since.checked_add(limits.header),
                    Phase::Busy => None,
                }
            };
            match deadline {
                Some(deadline) if deadline <= Instant::now() => return Verdict::Close,
                Some(deadline) => {
                    tokio::select! {
                        () = changed => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// A request being answered; dropped when its answer's body is sent (or abandoned).
struct Answering(Arc<Connection>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.update(|state| {
            state.answering = state.answering.saturating_sub(1);
            if state.answering == 0 {
                state.phase = Phase::Waiting;
                state.since = Instant::now();
            }
        });
    }
}

/// The open connections.
pub struct Connections {
    limits: Limits,
    open: Mutex<Vec<Arc<Connection>>>,
    /// Told each time a connection ends.
    ended: Notify,
}

impl Connections {
    pub fn new(limits: Limits) -> Self {
        Connections {
            limits,
            open: Mutex::new(Vec::new()),
            ended: Notify::new(),
        }
    }

    fn open(&self) -> MutexGuard<'_, Vec<Arc<Connection>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many connections are open.
    pub fn count(&self) -> usize {
        self.open().len()
    }

    /// How many of the open connections are answering a request.
    pub fn busy(&self) -> usize {
        self.open()
            .iter()
            .filter(|connection| connection.state().phase == Phase::Busy)
            .count()
    }

    /// Accepts connections on `listener` and serves `router` on each until `stop` resolves;
    /// then waits for the connections still open to end (see [`Connections::drain`]). Dropping
    /// the future closes them all.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        router: Router,
        stop: impl Future<Output = ()>,
    ) {
        let mut builder = http1::Builder::new();
        // hyper's own bound on a request's head, counted from when it waits for one: a backstop
        // for the idle and header timeouts watched here.
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.idle.saturating_add(self.limits.header));
        let mut tasks = JoinSet::new();
        tokio::pin!(stop);
        loop {
            let accepted = tokio::select! {
                () = &mut stop => break,
                accepted = listener.accept() => accepted,
            };
            let Ok((stream, _)) = accepted else {
                tokio::select! {
                    () = &mut stop => break,
                    () = tokio::time::sleep(ACCEPT_PAUSE) => continue,
                }
            };
            tokio::select! {
                () = &mut stop => break,
                () = self.make_room() => {}
            }
            let connection = Arc::new(Connection::new());
            self.open().push(Arc::clone(&connection));
            tasks.spawn(Arc::clone(&self).serve_one(
                connection,
                stream,
                router.clone(),
                builder.clone(),
            ));
            while tasks.try_join_next().is_some() {}
        }
        drop(listener);
        self.drain();
        while tasks.join_next().await.is_some() {}
    }

    /// Below the limit, at once; at it, after closing the connection that has waited longest
    /// without a request being answered, or after some connection ended when all are busy.
    async fn make_room(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let open = self.open();
                if open.len() < self.limits.max_connections.max(1) {
                    return;
                }
                let idlest = open
                    .iter()
                    .filter_map(|connection| {
                        let state = connection.state();
                        (state.phase != Phase::Busy && !state.evicted)
                            .then_some((state.since, connection))
                    })
                    .min_by_key(|(since, _)| *since);
                if let Some((_, connection)) = idlest {
                    connection.update(|state| state.evicted = true);
                }
            }
            ended.await;
        }
    }

    /// Closes every connection that is not answering a request, and has the others close once
    /// their answer is sent.
    fn drain(&self) {
        for connection in self.open().iter() {
            connection.update(|state| state.draining = true);
        }
    }

    async fn serve_one(
        self: Arc<Self>,
        connection: Arc<Connection>,
        stream: TcpStream,
        router: Router,
        builder: http1::Builder,
    ) {
        let body_timeout = self.limits.body;
        let io = TokioIo::new(Watched {
            stream,
            connection: Arc::clone(&connection),
        });
        let service = {
            let connection = Arc::clone(&connection);
            hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                let answering = connection.busy();
                let request = request.map(|body| Body::new(Passing::request(body, body_timeout)));
                let mut router = router.clone();
                async move {
                    let Ok(response) = router.call(request).await;
                    Ok::<_, Infallible>(response.map(|body| Passing::answer(body, answering)))
                }
            })
        };
        let served = builder.serve_connection(io, service);
        tokio::pin!(served);
        let mut finishing = false;
        loop {
            tokio::select! {
                _ = served.as_mut() => break,
                verdict = connection.watch(&self.limits, &mut finishing) => match verdict {
                    Verdict::Close => break,
                    Verdict::Finish => served.as_mut().graceful_shutdown(),
                },
            }
        }
        self.open().retain(|open| !Arc::ptr_eq(open, &connection));
        self.ended.notify_waiters();
    }
}

/// A connection's socket, telling the connection when bytes arrive.
struct Watched {
    stream: TcpStream,
    connection: Arc<Connection>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.connection.received();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// A request's body arrived too slowly: it was not all there within the body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request's body did not arrive within {} s", .0.as_secs_f64())]
pub struct BodyTooSlow(pub Duration);

/// A body passing through a connection: a request's, which fails with [`BodyTooSlow`] once its
/// time is up, or an answer's, which holds its connection busy until it is sent.
struct Passing<B> {
    body: B,
    /// A request's: when its time is up, and how long it had.
    deadline: Option<(Pin<Box<Sleep>>, Duration)>,
    /// An answer's: dropped when it is sent (or abandoned).
    _answering: Option<Answering>,
}

impl Passing<Incoming> {
    fn request(body: Incoming, limit: Duration) -> Self {
        Passing {
            body,
            deadline: Some((Box::pin(tokio::time::sleep(limit)), limit)),
            _answering: None,
        }
    }
}

impl Passing<Body> {
    fn answer(body: Body, answering: Answering) -> Self {
        Passing {
            body,
            deadline: None,
            _answering: Some(answering),
        }
    }
}

impl<B> HttpBody for Passing<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(axum::Error::new)));
        }
        if let Some((timer, limit)) = &mut this.deadline
            && timer.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(axum::Error::new(BodyTooSlow(*limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
