//! # spillway-test-nats
//!
//! A real NATS JetStream cluster on loopback for the NATS sink's tests and
//! the `e2e_jetstream` bench:
//! three `nats-server` processes (Debian's package, installed by
//! `.ci/nats.sh`), cluster routes on 127.0.0.1, each in its own temp
//! folder, JetStream on. The test may kill a node (SIGKILL, only the pids
//! it started) and start it again on its store, or freeze it (SIGSTOP) and
//! let it go on (SIGCONT). Each node serves its monitoring endpoint on
//! loopback, so a test can ask which node a client is connected to
//! (`/connz`). Dropping the cluster kills every node it started.
//!
//! [`NatsCluster::start`] fails the test under CI (`CI` set) when the
//! cluster cannot start; outside CI it returns `None` after printing why
//! (the caller skips). [`NatsCluster::try_start`] says why instead (the
//! bench reports it).

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use futures::StreamExt;
use spillway_test_http::free_port;
pub use spillway_test_http::TlsFiles;
use tokio::runtime::Runtime;

/// How long [`NatsCluster::read_stream`] keeps trying to read a whole
/// stream: a cluster that lost a node (frozen, killed) may answer "JetStream
/// system temporarily unavailable" (503) for seconds once it is back, while
/// its meta leader and the stream's leader settle.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a node (or the cluster) may take to be ready.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times [`NatsCluster::try_start`] starts the cluster on new
/// ports when a node finds one of its ports taken (another process bound
/// it between the pick and the node's start).
const START_ATTEMPTS: usize = 3;

/// How the servers are guarded: a token clients must send, and TLS.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    pub token: Option<String>,
    pub tls: Option<TlsFiles>,
}

/// How long a monitoring request may take: a frozen node accepts the
/// connection (the kernel does) and never answers.
const MONITOR_TIMEOUT: Duration = Duration::from_secs(5);

/// One `nats-server` of the cluster.
struct Node {
    name: String,
    client_port: u16,
    /// Its HTTP monitoring endpoint (`/connz`).
    monitor_port: u16,
    conf: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// SIGSTOPped: clients of the test must not try it (async-nats waits
    /// for a frozen server's INFO forever).
    stopped: bool,
}

/// A running cluster; see the module documentation.
pub struct NatsCluster {
    nodes: Vec<Node>,
    /// What the servers require of a client.
    guard: Guard,
    _dir: tempfile::TempDir,
    /// Runs the test's own client calls.
    pub runtime: Runtime,
}

/// Whether this runs in CI (`CI` set to anything but empty, `0` or
/// `false`), as the tests crate reads it.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// `nats-server` is there, or `.ci/nats.sh` installs it (Debian's package;
/// needs root, as `.ci/postgres.sh` does for PostgreSQL).
fn installed() -> Result<(), String> {
    let found = || {
        Command::new("nats-server")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if found() {
        return Ok(());
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/nats.sh");
    let out = Command::new(&script).output().map_err(|e| {
        format!(
            "nats-server is not installed and {} failed: {e}",
            script.display()
        )
    })?;
    if found() {
        return Ok(());
    }
    Err(format!(
        "nats-server is not installed and {} could not install it: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// What one stored message says.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub subject: String,
    pub msg_id: Option<String>,
    /// Every header, for failure messages.
    pub headers: String,
    pub payload: Vec<u8>,
}

impl NatsCluster {
    /// Starts `n` nodes and waits until JetStream answers on every one.
    pub fn start(n: usize) -> Option<NatsCluster> {
        Self::start_with(n, Guard::default())
    }

    /// [`NatsCluster::start`], the servers guarded by `guard` (a token,
    /// TLS). One node runs without a cluster block.
    pub fn start_with(n: usize, guard: Guard) -> Option<NatsCluster> {
        match Self::try_start(n, guard) {
            Ok(c) => Some(c),
            Err(why) if !in_ci() => {
                eprintln!("SKIPPED: cannot start a {n}-node nats-server cluster: {why}");
                None
            }
            Err(why) => panic!("cannot start a {n}-node nats-server cluster under CI: {why}"),
        }
    }

    pub fn try_start(n: usize, guard: Guard) -> Result<NatsCluster, String> {
        installed()?;
        let mut attempt = 1;
        loop {
            match Self::start_once(n, guard.clone()) {
                Err(why) if attempt < START_ATTEMPTS && why.contains("address already in use") => {
                    eprintln!("nats-server: a port was taken, starting the cluster again on new ports ({why:.200})");
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    /// One start on freshly picked ports; dropping the cluster on an error
    /// kills the nodes it started.
    fn start_once(n: usize, guard: Guard) -> Result<NatsCluster, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let monitor_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let mut nodes = Vec::new();
        for (i, (client_port, cluster_port)) in ports.iter().enumerate() {
            let name = format!("n{i}");
            let store = dir.path().join(&name);
            fs::create_dir_all(&store).map_err(|e| e.to_string())?;
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, c))| format!("\"nats-route://127.0.0.1:{c}\""))
                .collect();
            let conf = dir.path().join(format!("{name}.conf"));
            let mut text = format!(
                "server_name: {name}\nlisten: 127.0.0.1:{client_port}\nhttp: 127.0.0.1:{}\njetstream {{ store_dir: \"{}\" }}\n",
                monitor_ports[i],
                store.display()
            );
            if n > 1 {
                text.push_str(&format!(
                    "cluster {{ name: spillway-test, listen: 127.0.0.1:{cluster_port}, routes: [{}] }}\n",
                    routes.join(", ")
                ));
            }
            if let Some(t) = &guard.token {
                text.push_str(&format!("authorization {{ token: \"{t}\" }}\n"));
            }
            if let Some(tls) = &guard.tls {
                text.push_str(&format!(
                    "tls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
                    tls.cert.display(),
                    tls.key.display()
                ));
            }
            fs::write(&conf, text).map_err(|e| e.to_string())?;
            nodes.push(Node {
                log: dir.path().join(format!("{name}.log")),
                name,
                client_port: *client_port,
                monitor_port: monitor_ports[i],
                conf,
                child: None,
                stopped: false,
            });
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let mut cluster = NatsCluster {
            nodes,
            guard,
            _dir: dir,
            runtime,
        };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        cluster.wait_ready()?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let node = &mut self.nodes[i];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(|e| e.to_string())?;
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&node.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting nats-server {}: {e}", node.name))?;
        node.child = Some(child);
        Ok(())
    }

    /// Every running node answers JetStream requests (a meta leader is
    /// elected).
    /// A node that exits on the way (a port taken) is reported at once
    /// with its log, not after the timeout.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() || self.nodes[i].stopped {
                continue;
            }
            let url = self.url(i);
            loop {
                let answer = self.runtime.block_on(async {
                    let c = self
                        .options()
                        .connect(url.as_str())
                        .await
                        .map_err(|e| format!("connect: {e}"))?;
                    // The raw API call: async-nats' typed account info
                    // wants fields nats-server 2.9 does not send.
                    let reply = c
                        .request("$JS.API.INFO", "".into())
                        .await
                        .map_err(|e| format!("$JS.API.INFO: {e}"))?;
                    let v: serde_json::Value = serde_json::from_slice(&reply.payload)
                        .map_err(|e| format!("$JS.API.INFO answered no JSON: {e}"))?;
                    match v.get("error") {
                        None => Ok(()),
                        Some(e) => Err(format!("$JS.API.INFO: {e}")),
                    }
                });
                let Err(why) = answer else {
                    break;
                };
                let node = &mut self.nodes[i];
                let exited = node
                    .child
                    .as_mut()
                    .and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = exited {
                    return Err(format!(
                        "node {} exited ({status}) before it was ready ({why}); its log:\n{}",
                        node.name,
                        fs::read_to_string(&node.log).unwrap_or_default()
                    ));
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "node {} not ready after {READY_TIMEOUT:?} ({why}); its log:\n{}",
                        node.name,
                        fs::read_to_string(&node.log).unwrap_or_default()
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    fn options(&self) -> async_nats::ConnectOptions {
        let mut o = match &self.guard.token {
            Some(t) => async_nats::ConnectOptions::with_token(t.clone()),
            None => async_nats::ConnectOptions::new(),
        };
        if let Some(tls) = &self.guard.tls {
            o = o.add_root_certificates(tls.ca.clone()).require_tls(true);
        }
        o
    }

    pub fn url(&self, i: usize) -> String {
        let scheme = if self.guard.tls.is_some() {
            "tls"
        } else {
            "nats"
        };
        format!("{scheme}://127.0.0.1:{}", self.nodes[i].client_port)
    }

    /// Every node's URL, as a TOML array.
    pub fn servers_toml(&self) -> String {
        let urls: Vec<String> = (0..self.nodes.len())
            .map(|i| format!("\"{}\"", self.url(i)))
            .collect();
        format!("[{}]", urls.join(", "))
    }

    /// A client connected to the running nodes.
    pub fn client(&self) -> async_nats::Client {
        let urls: Vec<async_nats::ServerAddr> = (0..self.nodes.len())
            .filter(|i| self.nodes[*i].child.is_some() && !self.nodes[*i].stopped)
            .map(|i| self.url(i).parse().unwrap())
            .collect();
        self.runtime
            .block_on(self.options().connect(urls))
            .expect("connecting to the cluster")
    }

    /// Creates a file stream taking `subjects`, with `replicas` and a
    /// duplicate window of `window`.
    pub fn create_stream(&self, name: &str, subjects: &[&str], replicas: usize, window: Duration) {
        let js = jetstream::new(self.client());
        self.runtime
            .block_on(js.create_stream(stream::Config {
                name: name.to_string(),
                subjects: subjects.iter().map(|s| s.to_string()).collect(),
                num_replicas: replicas,
                duplicate_window: window,
                ..Default::default()
            }))
            .unwrap_or_else(|e| panic!("creating stream {name}: {e}"));
    }

    /// The node leading stream `name`'s replicas, if one does.
    pub fn stream_leader(&self, name: &str) -> Option<usize> {
        let js = jetstream::new(self.client());
        let leader = self.runtime.block_on(async {
            let mut s = js.get_stream(name).await.ok()?;
            s.info().await.ok()?.cluster.as_ref()?.leader.clone()
        })?;
        self.nodes.iter().position(|n| n.name == leader)
    }

    /// Messages stored in stream `name`; 0 while it does not answer (no
    /// leader during a failover).
    pub fn stream_messages(&self, name: &str) -> u64 {
        self.messages_via(&self.client(), name).unwrap_or(0)
    }

    /// Messages stored in stream `name`, asked over `client` (one the
    /// caller keeps, to poll often); `None` while the stream does not
    /// answer.
    pub fn messages_via(&self, client: &async_nats::Client, name: &str) -> Option<u64> {
        let js = jetstream::new(client.clone());
        self.runtime.block_on(async {
            let mut s = js.get_stream(name).await.ok()?;
            s.info().await.ok().map(|i| i.state.messages)
        })
    }

    /// Every message of stream `name`, in stream order.
    pub fn read_stream(&self, name: &str) -> Vec<StoredMessage> {
        // A cluster that settles (a node just resumed or restarted, its
        // routes, the meta leader and the stream's leader moving) may refuse
        // a consumer (503, "temporarily unavailable") or stall one for good:
        // a read that fails starts again with a new consumer after a pause
        // that doubles, until READ_TIMEOUT, and says so. Three reads back to
        // back were not enough: CI saw all three refused within a second of
        // a frozen node's return (jetstream.rs,
        // a_frozen_server_is_left_for_the_others_and_nothing_is_stored_twice).
        let started = Instant::now();
        let mut pause = Duration::from_millis(250);
        for attempt in 1.. {
            // Asked afresh: while the stream has no leader it does not
            // answer, and a count of 0 would "read" nothing.
            let why = match self.messages_via(&self.client(), name) {
                None => "the stream does not answer its info request".to_string(),
                Some(total) => match self.read_stream_once(name, total as usize) {
                    Ok(out) => return out,
                    Err(e) => e,
                },
            };
            if started.elapsed() + pause > READ_TIMEOUT {
                panic!(
                    "stream {name}: {why} (attempt {attempt}, {:?} after the first)",
                    started.elapsed()
                );
            }
            eprintln!(
                "reading stream {name}, attempt {attempt}: {why}; starting again with a new consumer in {pause:?}"
            );
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(4));
        }
        unreachable!("the loop returns or panics")
    }

    fn read_stream_once(&self, name: &str, total: usize) -> Result<Vec<StoredMessage>, String> {
        let js = jetstream::new(self.client());
        self.runtime.block_on(async {
            let s = js
                .get_stream(name)
                .await
                .map_err(|e| format!("the stream: {e}"))?;
            let consumer = s
                .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
                .await
                .map_err(|e| format!("an ordered consumer: {e}"))?;
            let mut messages = consumer
                .messages()
                .await
                .map_err(|e| format!("its messages: {e}"))?;
            let mut out = Vec::with_capacity(total);
            while out.len() < total {
                let next = tokio::time::timeout(Duration::from_secs(30), messages.next()).await;
                let m = match next {
                    Ok(Some(Ok(m))) => m,
                    Ok(Some(Err(e))) => {
                        return Err(format!("read {} of {total} messages, then: {e}", out.len()))
                    }
                    Ok(None) => {
                        return Err(format!(
                            "read {} of {total} messages, then the end",
                            out.len()
                        ))
                    }
                    Err(_) => {
                        return Err(format!(
                            "read {} of {total} messages, then nothing for 30 s",
                            out.len()
                        ))
                    }
                };
                out.push(StoredMessage {
                    subject: m.subject.to_string(),
                    msg_id: m
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                        .map(|v| v.to_string()),
                    headers: format!("{:?}", m.headers),
                    payload: m.payload.to_vec(),
                });
            }
            Ok(out)
        })
    }

    /// SIGKILL node `i` (a process this cluster started) and reap it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL node `i` without reaping it (from a thread that shares the
    /// cluster); [`NatsCluster::kill`] reaps it later.
    pub fn signal_kill(&self, i: usize) {
        if let Some(child) = &self.nodes[i].child {
            let _ = Command::new("kill")
                .args(["-KILL", &child.id().to_string()])
                .status();
        }
    }

    /// SIGSTOP node `i`: it keeps its sockets open and answers nothing (a
    /// frozen VM, a stuck disk) until [`NatsCluster::resume`].
    pub fn freeze(&mut self, i: usize) {
        self.signal(i, "-STOP");
        self.nodes[i].stopped = true;
    }

    /// SIGCONT node `i` after [`NatsCluster::freeze`].
    pub fn resume(&mut self, i: usize) {
        self.signal(i, "-CONT");
        self.nodes[i].stopped = false;
    }

    fn signal(&self, i: usize, signal: &str) {
        let child = self.nodes[i].child.as_ref().expect("the node runs");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill {signal} node {i}: {status}");
    }

    /// The names of the client connections node `i` holds (its `/connz`),
    /// or why it did not answer within [`MONITOR_TIMEOUT`].
    pub fn connection_names(&self, i: usize) -> Result<Vec<String>, String> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.nodes[i].monitor_port));
        let mut s =
            TcpStream::connect_timeout(&addr, MONITOR_TIMEOUT).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(MONITOR_TIMEOUT))
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET /connz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&answer);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .ok_or_else(|| format!("no HTTP answer: {text:.200}"))?;
        let v: serde_json::Value =
            serde_json::from_str(body).map_err(|e| format!("/connz: {e}: {body:.200}"))?;
        Ok(v["connections"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The running, unfrozen nodes that hold a client connection whose
    /// name starts with `prefix`.
    pub fn nodes_with_client(&self, prefix: &str) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|i| self.nodes[*i].child.is_some() && !self.nodes[*i].stopped)
            .filter(|i| {
                self.connection_names(*i)
                    .is_ok_and(|names| names.iter().any(|n| n.starts_with(prefix)))
            })
            .collect()
    }

    /// Start node `i` again on its store and wait until it answers.
    pub fn restart(&mut self, i: usize) {
        self.spawn(i).expect("restarting the node");
        self.wait_ready().expect("the restarted node ready");
    }

    /// A node's log, for failure messages.
    pub fn log(&self, i: usize) -> String {
        fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
