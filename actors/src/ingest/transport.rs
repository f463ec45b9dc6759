//! The byte streams a producer connection runs over: a Unix socket, plain
//! TCP (loopback only, `server.tcp.tls = false`) or TLS over TCP.
//!
//! The ack path differs by one thing. On a Unix or plain TCP socket the
//! flusher's thread writes acks straight to the descriptor
//! ([`crate::ingest::responder`]), and the connection writes what the socket did
//! not take once it is writable (readiness, then `try_write`). A TLS stream
//! must encrypt, so nobody writes its descriptor but the connection's own
//! task: the flusher only encodes the acks and wakes the connection, which
//! writes them through rustls ([`Writer::Tls`]).

use std::io;
use std::os::unix::io::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::{tcp, unix, TcpStream, UnixStream};
use tokio_rustls::server::TlsStream;

/// A connection's stream, before it is split.
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The descriptor the flusher may write acks to directly (`None` for
    /// TLS: only the connection writes, through rustls).
    pub(crate) fn direct_fd(&self) -> Option<RawFd> {
        match self {
            Stream::Unix(s) => Some(s.as_raw_fd()),
            Stream::Tcp(s) => Some(s.as_raw_fd()),
            Stream::Tls(_) => None,
        }
    }

    pub(crate) fn split(self) -> (Reader, Writer) {
        match self {
            Stream::Unix(s) => {
                let (r, w) = s.into_split();
                (
                    Reader::Unix(r),
                    Writer::Ready(Rc::new(ReadyWriter::Unix(w))),
                )
            }
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (Reader::Tcp(r), Writer::Ready(Rc::new(ReadyWriter::Tcp(w))))
            }
            Stream::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (Reader::Tls(r), Writer::Tls(Some(w)))
            }
        }
    }
}

/// The read half.
pub(crate) enum Reader {
    Unix(unix::OwnedReadHalf),
    Tcp(tcp::OwnedReadHalf),
    Tls(ReadHalf<TlsStream<TcpStream>>),
}

impl AsyncRead for Reader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Reader::Unix(r) => Pin::new(r).poll_read(cx, buf),
            Reader::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            Reader::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

/// The write half.
pub(crate) enum Writer {
    /// A socket written by readiness (and by the flusher, directly).
    Ready(Rc<ReadyWriter>),
    /// A TLS stream, written only by the connection; `None` while a write
    /// is in flight (the future owns it).
    Tls(Option<WriteHalf<TlsStream<TcpStream>>>),
}

/// The write half of a Unix or plain TCP socket.
pub(crate) enum ReadyWriter {
    Unix(unix::OwnedWriteHalf),
    Tcp(tcp::OwnedWriteHalf),
}

impl ReadyWriter {
    pub(crate) async fn writable(&self) -> io::Result<()> {
        match self {
            ReadyWriter::Unix(w) => w.writable().await,
            ReadyWriter::Tcp(w) => w.writable().await,
        }
    }

    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            ReadyWriter::Unix(w) => w.try_write(buf),
            ReadyWriter::Tcp(w) => w.try_write(buf),
        }
    }
}
