//! The receiver against a raw TCP client, so malformed and pipelined
//! requests can be sent as bytes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use spillway_test_http::{Receiver, Reply, Request};

fn connect(rx: &Receiver) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(rx.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let reader = BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

fn post(stream: &mut TcpStream, path: &str, body: &[u8]) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nX-Tenant: blue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
}

/// Status, headers (names lower-cased) and body of the next response.
fn response(reader: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break;
        };
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (status, headers, body)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Polls `done` for up to 5 s; true once it held.
fn eventually(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    done()
}

/// True once the server closed the connection (EOF).
fn closed(reader: &mut BufReader<TcpStream>) -> bool {
    let mut rest = Vec::new();
    matches!(reader.read_to_end(&mut rest), Ok(0))
}

#[test]
fn records_each_request_and_answers_as_the_handler_says() {
    let rx = Receiver::start(|r: &Request| {
        if r.body == b"bad" {
            Reply::status(429)
                .header("Retry-After", "2")
                .body(b"slow down")
        } else {
            Reply::status(201)
        }
    });
    let (mut stream, mut reader) = connect(&rx);
    post(&mut stream, "/ingest?x=1", b"good");
    let (status, _, body) = response(&mut reader);
    assert_eq!((status, body.as_slice()), (201, &b""[..]));
    post(&mut stream, "/ingest", b"bad");
    let (status, headers, body) = response(&mut reader);
    assert_eq!(status, 429);
    assert_eq!(header(&headers, "retry-after"), Some("2"));
    assert_eq!(body, b"slow down");

    let requests = rx.requests();
    assert_eq!(requests.len(), 2);
    let r = &requests[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/ingest?x=1")
    );
    assert_eq!(r.header("X-TENANT"), Some("blue"));
    assert_eq!(r.header("content-length"), Some("4"));
    assert_eq!(r.body, b"good");
    assert_eq!((r.status, r.accepted()), (Some(201), true));
    assert_eq!(
        (requests[1].status, requests[1].accepted()),
        (Some(429), false)
    );
    assert!(requests[0].at <= requests[1].at);
    assert_eq!(
        (rx.request_count(), rx.connections(), rx.refused()),
        (2, 1, 0)
    );
}

#[test]
fn chunked_bodies_and_pipelined_requests_on_one_connection() {
    let rx = Receiver::replying(200);
    let (mut stream, mut reader) = connect(&rx);
    stream
        .write_all(
            b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
              3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n\
              POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nfg",
        )
        .unwrap();
    assert_eq!(response(&mut reader).0, 200);
    assert_eq!(response(&mut reader).0, 200);
    let bodies: Vec<Vec<u8>> = rx.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies, [b"abcde".to_vec(), b"fg".to_vec()]);
    assert_eq!(rx.connections(), 1);
}

#[test]
fn a_delayed_reply_keeps_its_request_in_flight() {
    let rx = Receiver::start(|_: &Request| Reply::status(200).after(Duration::from_millis(300)));
    let (mut a, mut a_reader) = connect(&rx);
    let (mut b, mut b_reader) = connect(&rx);
    let started = Instant::now();
    post(&mut a, "/", b"a");
    post(&mut b, "/", b"b");
    assert!(eventually(|| rx.in_flight() == 2), "{}", rx.in_flight());
    assert!(rx.requests().iter().all(|r| r.status.is_none()));
    assert_eq!(response(&mut a_reader).0, 200);
    assert_eq!(response(&mut b_reader).0, 200);
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    // Both waited at once, not one after the other: both were in flight
    // together (a wall-clock bound here failed on a loaded 2-core machine).
    assert_eq!((rx.in_flight(), rx.in_flight_max()), (0, 2));
    let connections: Vec<usize> = rx.requests().iter().map(|r| r.connection).collect();
    assert!(
        connections == [0, 1] || connections == [1, 0],
        "{connections:?}"
    );
}

#[test]
fn a_closed_gate_holds_requests_until_it_opens() {
    let rx = Receiver::replying(200);
    rx.close_gate();
    let (mut stream, mut reader) = connect(&rx);
    post(&mut stream, "/", b"held");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(rx.request_count(), 0);
    let opened = Instant::now();
    rx.open_gate();
    assert_eq!(response(&mut reader).0, 200);
    assert_eq!(rx.request_count(), 1);
    // Its arrival is when the gate let it through.
    assert!(rx.requests()[0].at >= opened);
}

#[test]
fn a_malformed_request_is_refused_and_its_connection_closed() {
    let rx = Receiver::replying(200);
    let (mut stream, mut reader) = connect(&rx);
    stream
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: twelve\r\n\r\n")
        .unwrap();
    assert_eq!(response(&mut reader).0, 400);
    assert!(closed(&mut reader));
    // Counted when hyper gives the connection up, just after it closed it.
    assert!(eventually(|| rx.refused() == 1), "{}", rx.refused());
    assert_eq!(rx.request_count(), 0);
}

#[test]
fn an_oversized_head_or_body_is_refused() {
    let rx = Receiver::replying(200);
    let (mut stream, mut reader) = connect(&rx);
    let huge = "x".repeat(70 * 1024);
    let head = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Huge: {huge}\r\n\r\n");
    let _ = stream.write_all(head.as_bytes());
    assert_eq!(response(&mut reader).0, 431);
    assert!(closed(&mut reader));
    assert!(eventually(|| rx.refused() == 1), "{}", rx.refused());

    let (mut stream, mut reader) = connect(&rx);
    stream
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 200000000\r\n\r\n")
        .unwrap();
    assert_eq!(response(&mut reader).0, 413);
    assert!(closed(&mut reader));
    assert_eq!((rx.refused(), rx.request_count()), (2, 0));
}

#[test]
fn connection_close_from_either_side_closes_after_the_answer() {
    let rx = Receiver::start(|r: &Request| {
        if r.path == "/bye" {
            Reply::status(200).header("Connection", "close")
        } else {
            Reply::status(200)
        }
    });
    let (mut stream, mut reader) = connect(&rx);
    post(&mut stream, "/bye", b"");
    assert_eq!(response(&mut reader).0, 200);
    assert!(closed(&mut reader));

    let (mut stream, mut reader) = connect(&rx);
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (status, headers, _) = response(&mut reader);
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "connection"), Some("close"));
    assert!(closed(&mut reader));
}

#[test]
fn dropping_the_receiver_closes_its_connections() {
    let rx = Receiver::start(|_: &Request| Reply::status(200).after(Duration::from_secs(30)));
    let addr = rx.addr();
    let (mut stream, mut reader) = connect(&rx);
    post(&mut stream, "/", b"pending");
    assert!(eventually(|| rx.in_flight() == 1));
    let dropping = Instant::now();
    drop(rx);
    assert!(dropping.elapsed() < Duration::from_secs(5));
    assert!(closed(&mut reader));
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
#[should_panic(expected = "keeps no requests")]
fn a_receiver_that_keeps_nothing_says_so() {
    let rx = Receiver::builder()
        .keep_requests(false)
        .start(|_: &Request| Reply::status(200))
        .unwrap();
    let _ = rx.requests();
}

/// Nobody saw an answer, so nothing was answered: a sink that timed out or
/// died during a held request must not count as having delivered it.
#[test]
fn a_client_that_leaves_during_the_delay_leaves_its_request_unanswered() {
    let rx = Receiver::start(|_: &Request| Reply::status(503).after(Duration::from_millis(200)));
    let (mut stream, reader) = connect(&rx);
    post(&mut stream, "/", b"impatient");
    assert!(eventually(|| rx.in_flight() == 1));
    drop((stream, reader));
    assert!(eventually(|| rx.in_flight() == 0), "{}", rx.in_flight());
    assert_eq!(rx.requests()[0].status, None);
    assert!(!rx.requests()[0].accepted());
}
