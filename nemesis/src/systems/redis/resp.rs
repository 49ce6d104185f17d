//! A minimal RESP2 client over a tokio `TcpStream`: one request at a time, commands as
//! arrays of bulk strings, and the five reply types. It is all the Redlock client needs
//! (`SET ... NX PX`, `EVAL`, `PING`), in about 150 lines, instead of the `redis` crate and
//! its dependencies (combine, url, sha1, ...): the harness must also know exactly when a
//! request was written and drop a connection whose reply is late, which a pool hides.

use std::net::SocketAddr;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

/// The longest bulk string or array a reply may announce (a bound on what a broken or
/// hostile peer can make the client allocate).
pub const REPLY_LEN_MAX: usize = 1 << 20;
/// The deepest nesting of arrays a reply may have.
const REPLY_DEPTH_MAX: usize = 4;

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR ...`: the server refused the command.
    Error(String),
    /// `:1`.
    Integer(i64),
    /// `$3\r\nabc`, or `$-1` (nil).
    Bulk(Option<Vec<u8>>),
    /// `*2\r\n...`, or `*-1` (nil).
    Array(Option<Vec<Reply>>),
}

/// Why a request got no reply.
#[derive(Debug, thiserror::Error)]
pub enum RespError {
    /// The socket failed (refused, reset, closed).
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes were not RESP2.
    #[error("protocol: {0}")]
    Protocol(String),
}

/// A connection to one server.
pub struct Connection {
    stream: BufReader<TcpStream>,
}

/// The bytes of a command: an array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

impl Connection {
    /// Connects (no timeout of its own: the caller bounds it).
    pub async fn connect(addr: SocketAddr) -> Result<Connection, RespError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream: BufReader::new(stream),
        })
    }

    /// Sends one command and reads its reply.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, RespError> {
        self.stream.get_mut().write_all(&encode(args)).await?;
        read_reply(&mut self.stream, 0).await
    }
}

async fn read_line(stream: &mut BufReader<TcpStream>) -> Result<String, RespError> {
    let mut line = Vec::new();
    let n = stream.read_until(b'\n', &mut line).await?;
    if n == 0 {
        return Err(RespError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    if !line.ends_with(b"\r\n") || line.len() > REPLY_LEN_MAX {
        return Err(RespError::Protocol("a line without CRLF".into()));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| RespError::Protocol("a line that is not UTF-8".into()))
}

fn length(text: &str) -> Result<Option<usize>, RespError> {
    let n: i64 = text
        .parse()
        .map_err(|_| RespError::Protocol(format!("bad length {text:?}")))?;
    match n {
        -1 => Ok(None),
        n if n < 0 || n as usize > REPLY_LEN_MAX => {
            Err(RespError::Protocol(format!("length {n} out of bounds")))
        }
        n => Ok(Some(n as usize)),
    }
}

fn read_reply(
    stream: &mut BufReader<TcpStream>,
    depth: usize,
) -> futures::future::BoxFuture<'_, Result<Reply, RespError>> {
    Box::pin(async move {
        let line = read_line(stream).await?;
        let (kind, rest) = line.split_at(line.len().min(1));
        match kind {
            "+" => Ok(Reply::Simple(rest.to_owned())),
            "-" => Ok(Reply::Error(rest.to_owned())),
            ":" => rest
                .parse()
                .map(Reply::Integer)
                .map_err(|_| RespError::Protocol(format!("bad integer {rest:?}"))),
            "$" => match length(rest)? {
                None => Ok(Reply::Bulk(None)),
                Some(n) => {
                    let mut body = vec![0; n + 2];
                    stream.read_exact(&mut body).await?;
                    if !body.ends_with(b"\r\n") {
                        return Err(RespError::Protocol("a bulk string without CRLF".into()));
                    }
                    body.truncate(n);
                    Ok(Reply::Bulk(Some(body)))
                }
            },
            "*" if depth >= REPLY_DEPTH_MAX => {
                Err(RespError::Protocol("arrays nested too deep".into()))
            }
            "*" => match length(rest)? {
                None => Ok(Reply::Array(None)),
                Some(n) => {
                    let mut items = Vec::with_capacity(n.min(64));
                    for _ in 0..n {
                        items.push(read_reply(stream, depth + 1).await?);
                    }
                    Ok(Reply::Array(Some(items)))
                }
            },
            other => Err(RespError::Protocol(format!("unknown reply type {other:?}"))),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            encode(&[b"SET", b"k", b"v"]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n".to_vec()
        );
    }

    #[tokio::test]
    async fn every_reply_type_is_read_and_garbage_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let replies: [&[u8]; 6] = [
                b"+OK\r\n",
                b"$-1\r\n",
                b":1\r\n",
                b"*2\r\n$2\r\nab\r\n-ERR no\r\n",
                b"$3\r\nabc\r\n",
                b"?what\r\n",
            ];
            let mut buf = [0u8; 256];
            for reply in replies {
                let _ = socket.read(&mut buf).await;
                socket.write_all(reply).await.expect("write");
            }
        });
        let mut c = Connection::connect(addr).await.expect("connect");
        assert_eq!(
            c.call(&[b"PING"]).await.unwrap(),
            Reply::Simple("OK".into())
        );
        assert_eq!(c.call(&[b"GET", b"k"]).await.unwrap(), Reply::Bulk(None));
        assert_eq!(c.call(&[b"DEL", b"k"]).await.unwrap(), Reply::Integer(1));
        assert_eq!(
            c.call(&[b"X"]).await.unwrap(),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"ab".to_vec())),
                Reply::Error("ERR no".into())
            ]))
        );
        assert_eq!(
            c.call(&[b"GET", b"k"]).await.unwrap(),
            Reply::Bulk(Some(b"abc".to_vec()))
        );
        assert!(matches!(c.call(&[b"X"]).await, Err(RespError::Protocol(_))));
        server.await.expect("server");
    }
}
