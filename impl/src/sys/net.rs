//! TCP listeners and streams: tokio's, or turmoil's inside a simulation.
//!
//! A simulated host may only bind the unspecified address: [`TcpListener::bind`] keeps the
//! port of the configured address and binds `0.0.0.0` there when simulated.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A listening socket.
pub enum TcpListener {
    /// A real socket.
    Tokio(tokio::net::TcpListener),
    /// A socket on turmoil's simulated network.
    #[cfg(feature = "sim")]
    Sim(turmoil::net::TcpListener),
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TcpListener({:?})", self.local_addr().ok())
    }
}

impl TcpListener {
    /// Binds `addr` (its port on the unspecified address, when simulated).
    pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
        #[cfg(feature = "sim")]
        if super::simulated() {
            let any = SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), addr.port());
            return turmoil::net::TcpListener::bind(any)
                .await
                .map(TcpListener::Sim);
        }
        tokio::net::TcpListener::bind(addr)
            .await
            .map(TcpListener::Tokio)
    }

    /// Accepts the next connection, with Nagle off (every message here is small).
    pub async fn accept(&self) -> io::Result<TcpStream> {
        match self {
            TcpListener::Tokio(listener) => {
                let (stream, _) = listener.accept().await?;
                let _ = stream.set_nodelay(true);
                Ok(TcpStream::Tokio(stream))
            }
            #[cfg(feature = "sim")]
            TcpListener::Sim(listener) => {
                let (stream, _) = listener.accept().await?;
                Ok(TcpStream::Sim(stream))
            }
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            TcpListener::Tokio(listener) => listener.local_addr(),
            #[cfg(feature = "sim")]
            TcpListener::Sim(listener) => listener.local_addr(),
        }
    }
}

/// A connected stream.
#[derive(Debug)]
pub enum TcpStream {
    /// A real socket.
    Tokio(tokio::net::TcpStream),
    /// A stream on turmoil's simulated network.
    #[cfg(feature = "sim")]
    Sim(turmoil::net::TcpStream),
}

impl TcpStream {
    /// Connects to `addr`, with Nagle off.
    pub async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
        #[cfg(feature = "sim")]
        if super::simulated() {
            return turmoil::net::TcpStream::connect(addr)
                .await
                .map(TcpStream::Sim);
        }
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        Ok(TcpStream::Tokio(stream))
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TcpStream::Tokio(stream) => Pin::new(stream).poll_read(cx, buf),
            #[cfg(feature = "sim")]
            TcpStream::Sim(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            TcpStream::Tokio(stream) => Pin::new(stream).poll_write(cx, buf),
            #[cfg(feature = "sim")]
            TcpStream::Sim(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TcpStream::Tokio(stream) => Pin::new(stream).poll_flush(cx),
            #[cfg(feature = "sim")]
            TcpStream::Sim(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            TcpStream::Tokio(stream) => Pin::new(stream).poll_shutdown(cx),
            #[cfg(feature = "sim")]
            TcpStream::Sim(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}
