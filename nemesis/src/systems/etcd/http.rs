//! A minimal HTTP/1.1 client for etcd's JSON gateway on loopback.
//!
//! etcd serves its gRPC API and a JSON translation of it (grpc-gateway) on the same client
//! port. Every unary call is `POST /v3/<service>/<method>` with a JSON body; streaming calls
//! (watch, lease keep-alive) answer with a chunked body of newline-separated JSON objects.
//! This module speaks just enough HTTP/1.1 for that: one request at a time on a keep-alive
//! connection, `Content-Length` or `chunked` bodies (trailers skipped), nothing else. It
//! never follows redirects, never uses TLS, and bounds every header and body it reads.
//!
//! Deadlines are the caller's: every await here can be wrapped in `tokio::time::timeout`,
//! after which the connection must be dropped (its state is unknown).

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The longest status line or header line accepted, in bytes.
const HEADER_LINE_BYTES_MAX: usize = 8 * 1024;
/// The most header lines accepted in one response (or trailer).
const HEADER_LINES_MAX: usize = 64;
/// The largest response body (or one streamed message) accepted, in bytes.
pub(crate) const BODY_BYTES_MAX: usize = 16 * 1024 * 1024;

/// What went wrong on the wire. `Connect` means the request was certainly not sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    /// The TCP connection could not be opened: nothing was sent.
    #[error("connect to {addr}: {source}")]
    Connect {
        /// The endpoint.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// Reading or writing failed after the connection was open: the request may have been
    /// received.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection before a complete response.
    #[error("connection closed before a complete response")]
    Closed,
    /// The response broke HTTP/1.1 framing or a bound of this module.
    #[error("bad response: {0}")]
    Protocol(String),
}

/// A complete response: the status code and the body bytes.
#[derive(Debug)]
pub(crate) struct Response {
    /// The HTTP status code.
    pub(crate) status: u16,
    /// The body, de-chunked.
    pub(crate) body: Vec<u8>,
}

/// How the body of a response is framed.
enum Framing {
    Length(usize),
    Chunked,
}

/// One keep-alive HTTP/1.1 connection.
pub(crate) struct Connection {
    stream: BufReader<TcpStream>,
    host: String,
}

impl Connection {
    /// Opens a TCP connection to `addr` (no-delay on, as every request is one small write).
    pub(crate) async fn connect(addr: SocketAddr) -> Result<Self, HttpError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| HttpError::Connect { addr, source })?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream: BufReader::new(stream),
            host: addr.to_string(),
        })
    }

    /// True when the connection can carry another request: the peer has not closed it and
    /// sent nothing unasked. (A node that was killed and restarted leaves its clients'
    /// connections closed; sending on one would make a definite failure look unknown.)
    pub(crate) fn is_reusable(&self) -> bool {
        if !self.stream.buffer().is_empty() {
            return false;
        }
        let mut probe = [0; 1];
        matches!(
            self.stream.get_ref().try_read(&mut probe),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock
        )
    }

    /// Sends `POST path` with a JSON body and reads the whole response.
    pub(crate) async fn post(&mut self, path: &str, body: &[u8]) -> Result<Response, HttpError> {
        self.send(path, body).await?;
        let (status, framing) = self.read_head().await?;
        let body = match framing {
            Framing::Length(length) => {
                let mut body = vec![0; length];
                self.stream
                    .read_exact(&mut body)
                    .await
                    .map_err(eof_closed)?;
                body
            }
            Framing::Chunked => {
                let mut body = Vec::new();
                while self.read_chunk(&mut body).await? {}
                body
            }
        };
        Ok(Response { status, body })
    }

    /// Sends `POST path` for a streaming call and returns the stream of its messages. The
    /// connection is used up: a stream is never reused for another request.
    pub(crate) async fn post_stream(
        mut self,
        path: &str,
        body: &[u8],
    ) -> Result<MessageStream, HttpError> {
        self.send(path, body).await?;
        let (status, framing) = self.read_head().await?;
        let mut stream = MessageStream {
            connection: self,
            buffer: Vec::new(),
            ended: false,
        };
        match framing {
            Framing::Chunked if status == 200 => Ok(stream),
            Framing::Chunked => {
                while stream.connection.read_chunk(&mut stream.buffer).await? {}
                Err(HttpError::Protocol(format!(
                    "stream answered status {status}: {}",
                    String::from_utf8_lossy(&stream.buffer)
                )))
            }
            Framing::Length(_) => Err(HttpError::Protocol(format!(
                "stream answered status {status} with a fixed-length body"
            ))),
        }
    }

    async fn send(&mut self, path: &str, body: &[u8]) -> Result<(), HttpError> {
        // `Grpc-Metadata-hasleader: true` becomes the gRPC metadata `hasleader=true`, which
        // makes a node without a leader refuse at once ("etcdserver: no leader") instead of
        // queueing the request until its deadline (clientv3's WithRequireLeader).
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Grpc-Metadata-hasleader: true\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        );
        let mut request = Vec::with_capacity(head.len() + body.len());
        request.extend_from_slice(head.as_bytes());
        request.extend_from_slice(body);
        let stream = self.stream.get_mut();
        stream.write_all(&request).await?;
        stream.flush().await?;
        Ok(())
    }

    /// Reads the status line and the headers; returns the status and the body framing.
    async fn read_head(&mut self) -> Result<(u16, Framing), HttpError> {
        let status_line = self.read_line().await?;
        let status = parse_status_line(&status_line)?;
        let mut framing = None;
        for _ in 0..HEADER_LINES_MAX {
            let line = self.read_line().await?;
            if line.is_empty() {
                return framing
                    .ok_or_else(|| HttpError::Protocol("no Content-Length and not chunked".into()))
                    .map(|framing| (status, framing));
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(HttpError::Protocol(format!(
                    "header without a colon: {line:?}"
                )));
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                let length: usize = value
                    .parse()
                    .map_err(|_| HttpError::Protocol(format!("Content-Length {value:?}")))?;
                if length > BODY_BYTES_MAX {
                    return Err(HttpError::Protocol(format!(
                        "body of {length} bytes exceeds {BODY_BYTES_MAX}"
                    )));
                }
                framing = Some(Framing::Length(length));
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                if !value.eq_ignore_ascii_case("chunked") {
                    return Err(HttpError::Protocol(format!("Transfer-Encoding {value:?}")));
                }
                framing = Some(Framing::Chunked);
            }
        }
        Err(HttpError::Protocol(format!(
            "more than {HEADER_LINES_MAX} header lines"
        )))
    }

    /// Reads one chunk and appends it to `body`; returns false after the last chunk (whose
    /// trailer lines it skips).
    async fn read_chunk(&mut self, body: &mut Vec<u8>) -> Result<bool, HttpError> {
        let size_line = self.read_line().await?;
        let size_text = size_line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| HttpError::Protocol(format!("chunk size {size_line:?}")))?;
        if size == 0 {
            for _ in 0..HEADER_LINES_MAX {
                if self.read_line().await?.is_empty() {
                    return Ok(false);
                }
            }
            return Err(HttpError::Protocol("endless trailer".into()));
        }
        if body.len() + size > BODY_BYTES_MAX {
            return Err(HttpError::Protocol(format!(
                "body exceeds {BODY_BYTES_MAX} bytes"
            )));
        }
        let start = body.len();
        body.resize(start + size, 0);
        self.stream
            .read_exact(&mut body[start..])
            .await
            .map_err(eof_closed)?;
        let mut crlf = [0; 2];
        self.stream
            .read_exact(&mut crlf)
            .await
            .map_err(eof_closed)?;
        if &crlf != b"\r\n" {
            return Err(HttpError::Protocol("chunk not followed by CRLF".into()));
        }
        Ok(true)
    }

    /// Reads one CRLF-terminated line, without the CRLF.
    async fn read_line(&mut self) -> Result<String, HttpError> {
        let mut line = Vec::new();
        let read = (&mut self.stream)
            .take(HEADER_LINE_BYTES_MAX as u64 + 2)
            .read_until(b'\n', &mut line)
            .await?;
        if read == 0 {
            return Err(HttpError::Closed);
        }
        if line.last() != Some(&b'\n') {
            return Err(HttpError::Protocol(format!(
                "line longer than {HEADER_LINE_BYTES_MAX} bytes or cut short"
            )));
        }
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        String::from_utf8(line).map_err(|_| HttpError::Protocol("line is not UTF-8".into()))
    }
}

/// The messages of a streaming call: one JSON object per line of the chunked body.
pub(crate) struct MessageStream {
    connection: Connection,
    buffer: Vec<u8>,
    ended: bool,
}

impl MessageStream {
    /// Waits for the next message and returns its bytes (one JSON object).
    pub(crate) async fn next_message(&mut self) -> Result<Vec<u8>, HttpError> {
        loop {
            if let Some(end) = self.buffer.iter().position(|&byte| byte == b'\n') {
                let mut message: Vec<u8> = self.buffer.drain(..=end).collect();
                message.pop();
                if message.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(message);
            }
            if self.ended {
                return Err(HttpError::Closed);
            }
            if !self.connection.read_chunk(&mut self.buffer).await? {
                self.ended = true;
                // A last message without its newline still counts.
                if !self.buffer.iter().all(u8::is_ascii_whitespace) {
                    self.buffer.push(b'\n');
                }
            }
        }
    }
}

/// One request on a fresh connection with a deadline; the body when the answer is 200 OK.
pub(crate) async fn post_once(
    addr: SocketAddr,
    path: &str,
    body: &[u8],
    timeout: std::time::Duration,
) -> Option<Vec<u8>> {
    let call = async {
        let mut connection = Connection::connect(addr).await?;
        connection.post(path, body).await
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(response)) if response.status == 200 => Some(response.body),
        _ => None,
    }
}

fn parse_status_line(line: &str) -> Result<u16, HttpError> {
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Protocol(format!("status line {line:?}")));
    }
    code.parse()
        .map_err(|_| HttpError::Protocol(format!("status line {line:?}")))
}

fn eof_closed(error: std::io::Error) -> HttpError {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        HttpError::Closed
    } else {
        HttpError::Io(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// Serves one canned response to the first request on a loopback listener.
    async fn serve_once(response: &'static [u8]) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0; 4096];
            let _ = socket.read(&mut request).await.unwrap();
            socket.write_all(response).await.unwrap();
        });
        addr
    }

    #[tokio::test]
    async fn chunked_body_with_trailer_is_joined_and_the_trailer_skipped() {
        // RFC 9112 §7.1: a chunked body ends with a zero chunk, then trailer lines, then CRLF;
        // etcd's gateway sends errors this way (Grpc-Trailer-Content-Type).
        let addr = serve_once(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n\
              5\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\nGrpc-Trailer-X: y\r\n\r\n",
        )
        .await;
        let mut connection = Connection::connect(addr).await.unwrap();
        let response = connection.post("/v3/x", b"{}").await.unwrap();
        assert_eq!(response.status, 404);
        assert_eq!(response.body, b"{\"a\": 1}");
    }

    #[tokio::test]
    async fn stream_messages_split_at_newlines_across_chunks() {
        // grpc-gateway streams one JSON object per line; chunk borders need not match lines.
        let addr = serve_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              4\r\n{\"a\"\r\n6\r\n:1}\n{}\r\n1\r\n\n\r\n0\r\n\r\n",
        )
        .await;
        let connection = Connection::connect(addr).await.unwrap();
        let mut stream = connection.post_stream("/v3/watch", b"{}").await.unwrap();
        assert_eq!(stream.next_message().await.unwrap(), b"{\"a\":1}");
        assert_eq!(stream.next_message().await.unwrap(), b"{}");
        assert!(matches!(
            stream.next_message().await,
            Err(HttpError::Closed)
        ));
    }

    #[tokio::test]
    async fn response_without_framing_is_refused() {
        // RFC 9112 §6.3: without Content-Length or chunked, the body runs to close; this
        // client keeps connections alive, so it refuses such a response instead of guessing.
        let addr = serve_once(b"HTTP/1.1 200 OK\r\n\r\n{}").await;
        let mut connection = Connection::connect(addr).await.unwrap();
        let error = connection.post("/v3/x", b"{}").await.unwrap_err();
        assert!(matches!(error, HttpError::Protocol(_)), "{error}");
    }
}
