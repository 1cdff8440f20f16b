//! An OTLP/HTTP receiver for tests: a collector on 127.0.0.1 port 0 that decodes every
//! `POST /v1/traces` body as an `ExportTraceServiceRequest` with opentelemetry-proto's generated
//! messages (the reference a real collector reads, not the exporter's own declarations) and keeps
//! it. It can also answer 503 (a collector that refuses), hold each request without answering
//! (a stalled collector), answer a partial success, or answer 200 with a body that never ends. A dead collector needs no receiver: an unused address refuses
//! connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::header::HeaderMap;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpMode {
    /// Decodes and keeps the spans; 200 with an empty `ExportTraceServiceResponse`.
    Accept,
    /// 503 without reading the spans.
    Unavailable,
    /// Never answers (the request is held until the receiver is dropped).
    Stall,
    /// Decodes and keeps the spans; 200 with a partial success rejecting `rejected_spans`.
    PartialSuccess { rejected_spans: i64 },
    /// Decodes and keeps the spans; 200 with a body that never ends (zeros for as long as they
    /// are read).
    EndlessBody,
}

/// One request the receiver kept.
#[derive(Debug, Clone)]
pub struct OtlpRequest {
    pub headers: HeaderMap,
    pub body: ExportTraceServiceRequest,
}

#[derive(Debug)]
struct State {
    mode: Mutex<OtlpMode>,
    requests: Mutex<Vec<OtlpRequest>>,
    arrived: AtomicUsize,
}

/// The receiver; stops (and drops every held connection) when dropped.
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl OtlpReceiver {
    /// A receiver that accepts.
    pub async fn start() -> OtlpReceiver {
        OtlpReceiver::start_in(OtlpMode::Accept).await
    }

    pub async fn start_in(mode: OtlpMode) -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver on port 0");
        let addr = listener.local_addr().expect("the receiver's address");
        let state = Arc::new(State {
            mode: Mutex::new(mode),
            requests: Mutex::new(Vec::new()),
            arrived: AtomicUsize::new(0),
        });
        let task = tokio::spawn(serve(listener, state.clone()));
        OtlpReceiver { addr, state, task }
    }

    /// The base endpoint, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it (`http://127.0.0.1:<port>`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Changes how later requests are answered.
    pub fn set_mode(&self, mode: OtlpMode) {
        *self
            .state
            .mode
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = mode;
    }

    /// How many `POST /v1/traces` requests arrived, whatever the answer.
    pub fn arrived(&self) -> usize {
        self.state.arrived.load(Ordering::SeqCst)
    }

    /// The requests kept (mode `Accept`), in arrival order.
    pub fn requests(&self) -> Vec<OtlpRequest> {
        self.state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every span kept, in arrival order.
    pub fn spans(&self) -> Vec<Span> {
        self.resource_spans()
            .into_iter()
            .map(|(_, span)| span)
            .collect()
    }

    /// Every span kept, with the resource it came with.
    pub fn resource_spans(&self) -> Vec<(Option<Resource>, Span)> {
        let mut out = Vec::new();
        for request in self.requests() {
            for resource_spans in request.body.resource_spans {
                for scope_spans in resource_spans.scope_spans {
                    for span in scope_spans.spans {
                        out.push((resource_spans.resource.clone(), span));
                    }
                }
            }
        }
        out
    }

    /// The spans once at least `n` were kept; panics when `within` passes first.
    pub async fn wait_for_spans(&self, n: usize, within: Duration) -> Vec<Span> {
        let start = Instant::now();
        loop {
            let spans = self.spans();
            if spans.len() >= n {
                return spans;
            }
            assert!(
                start.elapsed() < within,
                "the OTLP receiver kept {} spans, not {n}, within {within:?}",
                spans.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts connections until aborted; the connections live in a `JoinSet`, so aborting this
/// task ends them too (a stalled request included).
async fn serve(listener: TcpListener, state: Arc<State>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| answer(request, state.clone()));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

/// A response body: a whole one, or [`Endless`].
type Answer = Response<Either<Full<Bytes>, Endless>>;

async fn answer(request: Request<Incoming>, state: Arc<State>) -> Result<Answer, Infallible> {
    if request.method() != Method::POST || request.uri().path() != "/v1/traces" {
        return Ok(status(StatusCode::NOT_FOUND));
    }
    state.arrived.fetch_add(1, Ordering::SeqCst);
    let mode = *state.mode.lock().unwrap_or_else(PoisonError::into_inner);
    match mode {
        OtlpMode::Unavailable => return Ok(status(StatusCode::SERVICE_UNAVAILABLE)),
        OtlpMode::Stall => std::future::pending::<()>().await,
        OtlpMode::Accept | OtlpMode::PartialSuccess { .. } | OtlpMode::EndlessBody => {}
    }
    let (parts, body) = request.into_parts();
    if parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .is_none_or(|v| v != "application/x-protobuf")
    {
        return Ok(status(StatusCode::UNSUPPORTED_MEDIA_TYPE));
    }
    let Ok(body) = body.collect().await else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let Ok(body) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    state
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(OtlpRequest {
            headers: parts.headers,
            body,
        });
    let answer = match mode {
        OtlpMode::EndlessBody => Either::Right(Endless),
        OtlpMode::PartialSuccess { rejected_spans } => {
            Either::Left(encoded(ExportTraceServiceResponse {
                partial_success: Some(ExportTracePartialSuccess {
                    rejected_spans,
                    error_message: "rejected by the test receiver".to_owned(),
                }),
            }))
        }
        OtlpMode::Accept | OtlpMode::Unavailable | OtlpMode::Stall => {
            Either::Left(encoded(ExportTraceServiceResponse::default()))
        }
    };
    let mut response = Response::new(answer);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-protobuf"),
    );
    Ok(response)
}

fn encoded(answer: ExportTraceServiceResponse) -> Full<Bytes> {
    Full::new(Bytes::from(answer.encode_to_vec()))
}

/// A body of 16 KiB frames of zeros that never ends.
#[derive(Debug)]
struct Endless;

impl Body for Endless {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        static ZEROS: [u8; 16 * 1024] = [0; 16 * 1024];
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&ZEROS)))))
    }
}

fn status(code: StatusCode) -> Answer {
    let mut response = Response::new(Either::Left(Full::new(Bytes::new())));
    *response.status_mut() = code;
    response
}
