//! The metrics HTTP server: hyper on one thread's current-thread tokio runtime, with optional
//! TLS and basic auth, and the limits that bound what each connection may hold.

use super::*;

/// Connections the kernel queues for the metrics server before it accepts them (capped by
/// `net.core.somaxconn`).
pub const ACCEPT_BACKLOG: u32 = 1024;

/// How many connections the metrics server serves at once. Beyond it, each new connection
/// closes the oldest one (an idle one at once; one mid-request gets [`SHUTDOWN_GRACE`] to
/// finish), so a flood of connections cannot lock Prometheus out: its scrape is the newest.
pub const MAX_CONNECTIONS: usize = 256;

/// How long a connection may take to send a request's headers, counted from when the server
/// starts waiting for them: a new connection and an idle keep-alive one are closed after it,
/// and so is a client trickling header bytes. Prometheus sends its scrape at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The most bytes a request's start line and headers may take; more gets `431 Request Header
/// Fields Too Large` and the connection closed. A scrape sends a few hundred.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// How long a TLS client may take over its handshake (counted from the accept), so that one
/// trickling the handshake is closed as one trickling headers is.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = HEADER_READ_TIMEOUT;

/// The longest a connection lives, however busy: a client that reads its response slowly
/// cannot hold a connection (and its buffered response) longer than this.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// What a closed connection (the oldest beyond [`MAX_CONNECTIONS`], or one past
/// [`CONNECTION_LIFETIME`]) gets to finish a response it is writing.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How long the accept loop waits after a failed accept (e.g. out of file descriptors)
/// rather than spin on it.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How often the server looks at its stop flag.
pub(crate) const STOP_POLL: Duration = Duration::from_millis(200);

pub(crate) const TEXT_PLAIN: &str = "text/plain; charset=UTF-8";

/// The metrics server could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsServerError {
    #[error(transparent)]
    Runtime(std::io::Error),
    #[error("metrics.listen {listen}: {err}")]
    Bind {
        listen: SocketAddr,
        err: std::io::Error,
    },
    #[error(transparent)]
    LocalAddr(std::io::Error),
    #[error(transparent)]
    Thread(std::io::Error),
}

/// One answer of the metrics server.
pub(crate) struct Page {
    status: StatusCode,
    content_type: &'static str,
    body: String,
}

/// The server's pages, by request target (path and query, as the request line has it).
pub(crate) fn page(metrics: &Mutex<Metrics>, target: &str) -> Page {
    let metrics = || metrics.lock().unwrap_or_else(|poison| poison.into_inner());
    let ok = |content_type, body| Page {
        status: StatusCode::OK,
        content_type,
        body,
    };
    match target {
        "/metrics" => ok(
            "text/plain; version=0.0.4; charset=utf-8",
            metrics().render(),
        ),
        "/hosts" => ok("application/json", metrics().sources.meter.json()),
        "/" => ok(TEXT_PLAIN, "gateway: see /metrics and /hosts\n".into()),
        _ => Page {
            status: StatusCode::NOT_FOUND,
            content_type: TEXT_PLAIN,
            body: "not found\n".into(),
        },
    }
}

/// Serves `/metrics` on `listen` until `stop` is set, over TLS and behind basic auth when
/// `web` says so (`metrics.web_config`).
pub fn serve(
    listen: SocketAddr,
    metrics: Metrics,
    web: WebConfig,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, MetricsServerError> {
    let scheme = if web.tls.is_some() { "https" } else { "http" };
    if web.tls.is_none() && web.basic_auth.is_some() {
        tracing::warn!("metrics: basic auth without TLS sends the password in the clear");
    }
    let (bound, thread) = serve_with(listen, metrics, web, stop)?;
    tracing::info!(listen = %bound, "metrics on {scheme}://{bound}/metrics");
    Ok(thread)
}

/// Like [`serve`] in plain HTTP, and says where it listens (port 0 gets one from the kernel).
pub fn serve_on(
    listen: SocketAddr,
    metrics: Metrics,
    stop: Arc<AtomicBool>,
) -> Result<(SocketAddr, JoinHandle<()>), MetricsServerError> {
    serve_with(listen, metrics, WebConfig::default(), stop)
}

/// Like [`serve`], and says where it listens. One thread running a current-thread tokio
/// runtime, whatever the number of connections, within the limits above; with basic auth,
/// bcrypt checks run one at a time on the runtime's blocking pool (one more thread).
pub fn serve_with(
    listen: SocketAddr,
    metrics: Metrics,
    web: WebConfig,
    stop: Arc<AtomicBool>,
) -> Result<(SocketAddr, JoinHandle<()>), MetricsServerError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(1)
        .build()
        .map_err(MetricsServerError::Runtime)?;
    let listener = {
        // The listener registers with this runtime's reactor.
        let _runtime = runtime.enter();
        bind(listen).map_err(|err| MetricsServerError::Bind { listen, err })?
    };
    let bound = listener
        .local_addr()
        .map_err(MetricsServerError::LocalAddr)?;
    let endpoint = Endpoint {
        metrics: Arc::new(Mutex::new(metrics)),
        tls: web.tls.map(tokio_rustls::TlsAcceptor::from),
        basic_auth: web.basic_auth,
    };
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || runtime.block_on(accept_connections(listener, endpoint, stop)))
        .map_err(MetricsServerError::Thread)?;
    Ok((bound, thread))
}

/// What every connection shares: the metrics, and how a client must come in.
#[derive(Clone)]
pub(crate) struct Endpoint {
    metrics: Arc<Mutex<Metrics>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    basic_auth: Option<Arc<BasicAuth>>,
}

impl Endpoint {
    async fn answer(
        &self,
        request: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, hyper::http::Error> {
        if let Some(auth) = &self.basic_auth {
            let header = request.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
            match auth.check(header).await {
                AuthVerdict::Allowed => {}
                AuthVerdict::Denied => {
                    return Response::builder()
                        .status(StatusCode::UNAUTHORIZED)
                        .header(WWW_AUTHENTICATE, "Basic realm=\"gateway\"")
                        .header(CONTENT_TYPE, TEXT_PLAIN)
                        .body(Full::new(Bytes::from_static(b"Unauthorized\n")));
                }
                AuthVerdict::Busy => {
                    return Response::builder()
                        .status(StatusCode::SERVICE_UNAVAILABLE)
                        .header(RETRY_AFTER, "1")
                        .header(CONTENT_TYPE, TEXT_PLAIN)
                        .body(Full::new(Bytes::from_static(
                            b"too many password checks at once\n",
                        )));
                }
            }
        }
        let target = request.uri().path_and_query().map_or("", |p| p.as_str());
        let page = page(&self.metrics, target);
        Response::builder()
            .status(page.status)
            .header(CONTENT_TYPE, page.content_type)
            .body(Full::new(Bytes::from(page.body)))
    }
}

/// A listener whose accept queue holds [`ACCEPT_BACKLOG`] connections: std's 128 fills in
/// a few milliseconds of a connection flood, and a scrape's SYN dropped on a full queue is
/// only retried a second later.
pub(crate) fn bind(listen: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match listen {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As std does: a restart may bind while the last run's connections sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(listen)?;
    socket.listen(ACCEPT_BACKLOG)
}

pub(crate) async fn accept_connections(
    listener: tokio::net::TcpListener,
    endpoint: Endpoint,
    stop: Arc<AtomicBool>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(MAX_HEADER_BYTES);
    // One sender per open connection, oldest first; a connection's task drops its receiver
    // when it ends, which is how closed ones are told apart.
    let mut open: VecDeque<oneshot::Sender<()>> = VecDeque::new();
    let mut stop_poll = tokio::time::interval(STOP_POLL);
    while !stop.load(Ordering::Relaxed) {
        let accepted = tokio::select! {
            accepted = listener.accept() => Some(accepted),
            _ = stop_poll.tick() => None,
        };
        let stream = match accepted {
            None => continue,
            Some(Ok((stream, _))) => stream,
            Some(Err(err)) => {
                tracing::warn!(%err, "metrics: accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        open.retain(|connection| !connection.is_closed());
        if open.len() >= MAX_CONNECTIONS {
            if let Some(oldest) = open.pop_front() {
                let _ = oldest.send(());
            }
        }
        let (close, closed) = oneshot::channel();
        open.push_back(close);
        tokio::spawn(serve_connection(
            http.clone(),
            stream,
            endpoint.clone(),
            closed,
        ));
    }
    // Returning drops the runtime and with it every connection.
}

/// Answers requests on one connection until the client closes it, a limit closes it, or
/// `close` fires (or its sender is dropped). With TLS, the handshake first, which must end
/// within [`TLS_HANDSHAKE_TIMEOUT`]: a client trickling it holds its task no longer.
pub(crate) async fn serve_connection(
    http: hyper::server::conn::http1::Builder,
    stream: tokio::net::TcpStream,
    endpoint: Endpoint,
    mut close: oneshot::Receiver<()>,
) {
    let Some(acceptor) = endpoint.tls.clone() else {
        return serve_http(http, TokioIo::new(stream), endpoint, close).await;
    };
    let handshake = tokio::select! {
        handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)) => handshake,
        _ = &mut close => return,
    };
    match handshake {
        Ok(Ok(stream)) => serve_http(http, TokioIo::new(stream), endpoint, close).await,
        Ok(Err(err)) => tracing::debug!(%err, "metrics: TLS handshake failed"),
        Err(_) => tracing::debug!("metrics: TLS handshake timed out"),
    }
}

/// HTTP/1.1 on a connection (plain or TLS) until it ends, `close` fires or it outlives
/// [`CONNECTION_LIFETIME`].
pub(crate) async fn serve_http<I>(
    http: hyper::server::conn::http1::Builder,
    io: I,
    endpoint: Endpoint,
    mut close: oneshot::Receiver<()>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(|request: Request<Incoming>| {
        let endpoint = endpoint.clone();
        async move { endpoint.answer(request).await }
    });
    let connection = http.serve_connection(io, service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = &mut close => {}
        _ = tokio::time::sleep(CONNECTION_LIFETIME) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, connection).await;
}
