//! # spillway-test-kafka
//!
//! A real Apache Kafka 4.4 cluster on loopback for the Kafka sink's tests
//! and the Kafka bench: three JVMs from the jars `.ci/kafka.sh` resolves
//! (`SPILLWAY_TEST_KAFKA_LIBS`), each a combined broker and controller
//! (KRaft, no ZooKeeper) on 127.0.0.1 in its own temp folder. Topics are
//! durable (3 replicas, 2 in sync) and the cluster takes transactions as
//! soon as [`KafkaCluster::try_start`] returns. A test may kill a node
//! (SIGKILL, only the pids it started) and start it again on its folder.
//! Beside the plaintext listener, each node may serve TLS and SASL
//! (SCRAM-SHA-256/512, PLAIN) listeners ([`Guard`]); brokers and
//! controllers talk to each other in plaintext. Dropping the cluster kills
//! every node it started; the folders go with it.
//!
//! [`KafkaCluster::start`] fails the test under CI (`CI` set) when the
//! cluster cannot start; outside CI it returns `None` after printing why
//! (the caller skips). [`KafkaCluster::try_start`] says why instead (the
//! bench reports it).
//!
//! Measured on a 2-core machine: a start takes 9 to 10 s (formatting the
//! three folders in parallel about 3 s, the three JVMs about 4.5 s, the
//! first transactional producer's registration about 2 s); two clusters
//! starting at once (two tests) take about 19 s each. A killed leader's
//! partitions have a new leader within about 3 s (the broker session
//! timeout), and a restarted node is back in about 2.5 s.

mod load;
mod node;
mod perf;
mod read;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;
use spillway_test_http::free_port;

pub use load::TransactionalLoad;
use node::{Node, Ports};
pub use perf::PerfResult;
pub use read::StoredMessage;
pub use spillway_test_http::TlsFiles;

/// How long a start (or a restarted node) may take to be ready: three
/// JVMs starting at once on 2 cores take about 5 s, the transaction
/// coordinator's first election a few more.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// How long a topic may take to have a leader for every partition on
/// every node, or to be gone from every node.
const TOPIC_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one metadata or admin request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times [`KafkaCluster::try_start`] starts the cluster on new
/// ports when a node finds one of its ports taken (another process bound
/// it between the pick and the node's start).
const START_ATTEMPTS: usize = 3;

/// The jar whose presence says the folder holds Kafka 4.4.0.
const KAFKA_JAR: &str = "kafka_2.13-4.4.0.jar";

/// Which listeners each node serves besides the plaintext one.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// An `SSL` listener with this server certificate (no client
    /// certificates).
    pub tls: Option<TlsFiles>,
    /// A `SASL_PLAINTEXT` listener that knows this user under
    /// SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN.
    pub scram: Option<SaslUser>,
}

/// A SASL user and its password.
#[derive(Debug, Clone)]
pub struct SaslUser {
    pub name: String,
    pub password: String,
}

/// A running cluster; see the module documentation.
pub struct KafkaCluster {
    nodes: Vec<Node>,
    guard: Guard,
    /// The folder of Kafka's jars.
    libs: PathBuf,
    /// `-Dlog4j2.configurationFile=...` for the tools' JVMs.
    log4j2: String,
    /// Every node's folder; removed on drop, after the nodes are killed.
    _dir: tempfile::TempDir,
}

/// Whether this runs in CI (`CI` set to anything but empty, `0` or
/// `false`), as the tests crate reads it.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The folder of Kafka's jars: `SPILLWAY_TEST_KAFKA_LIBS`, else the
/// cache `.ci/kafka.sh` fills by default, which is run when that folder
/// has no Kafka (it resolves the jars with Maven; it installs Java and
/// Maven when they are missing, which needs root). Java must be on `PATH`.
fn installed() -> Result<PathBuf, String> {
    let java = Command::new("java")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    let libs = match std::env::var_os("SPILLWAY_TEST_KAFKA_LIBS") {
        Some(libs) => PathBuf::from(libs),
        None => {
            let home = std::env::var_os("HOME").unwrap_or_default();
            Path::new(&home).join(".cache/spillway/kafka-4.4.0/libs")
        }
    };
    if java && libs.join(KAFKA_JAR).exists() {
        return Ok(libs);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/kafka.sh");
    let out = Command::new(&script).output().map_err(|e| {
        format!(
            "Kafka's jars are not in {} and {} failed: {e}",
            libs.display(),
            script.display()
        )
    })?;
    let printed = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && printed.join(KAFKA_JAR).exists() {
        return Ok(printed);
    }
    Err(format!(
        "Java or Kafka's jars are missing ({}) and {} could not provide them: {}",
        libs.display(),
        script.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

impl KafkaCluster {
    /// Starts `n` nodes and waits until every one sees all `n` brokers and
    /// the cluster takes transactions.
    pub fn start(n: usize) -> Option<KafkaCluster> {
        Self::start_with(n, Guard::default())
    }

    /// [`KafkaCluster::start`], each node also serving the listeners of
    /// `guard`.
    pub fn start_with(n: usize, guard: Guard) -> Option<KafkaCluster> {
        match Self::try_start(n, guard) {
            Ok(c) => Some(c),
            Err(why) if !in_ci() => {
                eprintln!("skipped: cannot start a {n}-node Kafka cluster: {why}");
                None
            }
            Err(why) => panic!("cannot start a {n}-node Kafka cluster under CI: {why}"),
        }
    }

    pub fn try_start(n: usize, guard: Guard) -> Result<KafkaCluster, String> {
        let libs = installed()?;
        let mut attempt = 1;
        loop {
            match Self::start_once(n, guard.clone(), &libs) {
                Err(why)
                    if attempt < START_ATTEMPTS
                        && why.to_lowercase().contains("address already in use") =>
                {
                    eprintln!("kafka: a port was taken, starting the cluster again on new ports ({why:.200})");
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    /// One start on freshly picked ports; dropping the cluster on an error
    /// kills the nodes it started.
    fn start_once(n: usize, guard: Guard, libs: &Path) -> Result<KafkaCluster, String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let ports: Vec<Ports> = (0..n)
            .map(|_| Ports {
                plaintext: free_port(),
                controller: free_port(),
                tls: guard.tls.as_ref().map(|_| free_port()),
                sasl: guard.scram.as_ref().map(|_| free_port()),
            })
            .collect();
        // A static quorum: every node is a voter.
        let voters: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{i}@127.0.0.1:{}", p.controller))
            .collect();
        let log4j2 = node::write_log4j2(dir.path())?;
        let mut nodes = Vec::new();
        for (i, p) in ports.into_iter().enumerate() {
            nodes.push(Node::create(
                dir.path(),
                i,
                p,
                &voters.join(","),
                &guard,
                &log4j2,
            )?);
        }
        let mut cluster = KafkaCluster {
            nodes,
            guard,
            libs: libs.to_path_buf(),
            log4j2,
            _dir: dir,
        };
        cluster.format()?;
        for i in 0..n {
            cluster.nodes[i].spawn(&cluster.libs)?;
        }
        cluster.wait_ready(deadline)?;
        cluster.wait_transactions(deadline)?;
        Ok(cluster)
    }

    /// Formats every node's storage, all at once.
    fn format(&self) -> Result<(), String> {
        let mut tools = Vec::new();
        for node in &self.nodes {
            tools.push(node.start_format(&self.libs, &self.guard)?);
        }
        for (i, tool) in tools.into_iter().enumerate() {
            let out = tool.wait_with_output().map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "formatting node {i}'s storage ({}): {}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(())
    }

    /// Every running node answers metadata requests and lists every
    /// running node's broker (registered, not fenced). A node that exits
    /// on the way (a port taken) is reported at once with its log, not
    /// after the deadline.
    fn wait_ready(&mut self, deadline: Instant) -> Result<(), String> {
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|i| self.is_running(*i))
            .collect();
        for &i in &running {
            let client = self.node_client(i);
            loop {
                let why = match brokers_seen(&client, Duration::from_secs(1)) {
                    Ok(ids) if ids == running => break,
                    Ok(ids) => format!("it lists brokers {ids:?}, not {running:?}"),
                    Err(e) => e,
                };
                if let Some(status) = self.nodes[i].exited() {
                    return Err(format!(
                        "node {i} exited ({status}) before it was ready ({why}); its log:\n{}",
                        self.log(i)
                    ));
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "node {i} not ready after {READY_TIMEOUT:?} ({why}); its log:\n{}",
                        self.log(i)
                    ));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Ok(())
    }

    /// A transactional producer can register (`init_transactions`): the
    /// transaction state topic exists and its coordinators are elected.
    fn wait_transactions(&self, deadline: Instant) -> Result<(), String> {
        let producer: BaseProducer = self
            .client_config()
            .set("transactional.id", "spillway-test-kafka-ready")
            .create()
            .map_err(|e| format!("a transactional producer: {e}"))?;
        let left = deadline.saturating_duration_since(Instant::now());
        producer.init_transactions(left).map_err(|e| {
            format!(
                "the cluster takes no transactions (init_transactions: {e}); node 0's log:\n{}",
                self.log(0)
            )
        })
    }

    /// A client configuration that reaches the running nodes' plaintext
    /// listeners; the caller adds its own settings.
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.running_bootstrap())
            .set("reconnect.backoff.max.ms", "500");
        c
    }

    /// A client that asks node `i` only (until it learns of the others).
    fn node_client(&self, i: usize) -> BaseConsumer {
        ClientConfig::new()
            .set(
                "bootstrap.servers",
                format!("127.0.0.1:{}", self.nodes[i].ports.plaintext),
            )
            .set("reconnect.backoff.max.ms", "500")
            .create()
            .expect("a metadata client")
    }

    fn running_bootstrap(&self) -> String {
        let running: Vec<String> = (0..self.nodes.len())
            .filter(|i| self.is_running(*i))
            .map(|i| format!("127.0.0.1:{}", self.nodes[i].ports.plaintext))
            .collect();
        running.join(",")
    }

    /// Every node's plaintext listener, comma-separated
    /// (`bootstrap.servers`).
    pub fn bootstrap(&self) -> String {
        self.join_ports(|p| Some(p.plaintext))
            .expect("every node has a plaintext listener")
    }

    /// Every node's TLS listener, when the guard has TLS.
    pub fn bootstrap_tls(&self) -> Option<String> {
        self.join_ports(|p| p.tls)
    }

    /// Every node's SASL_PLAINTEXT listener (SCRAM-SHA-256, SCRAM-SHA-512,
    /// PLAIN), when the guard has a user.
    pub fn bootstrap_scram(&self) -> Option<String> {
        self.join_ports(|p| p.sasl)
    }

    fn join_ports(&self, port: impl Fn(&Ports) -> Option<u16>) -> Option<String> {
        let addrs: Option<Vec<String>> = self
            .nodes
            .iter()
            .map(|n| port(&n.ports).map(|p| format!("127.0.0.1:{p}")))
            .collect();
        addrs.map(|a| a.join(","))
    }

    /// Node `i`'s plaintext port.
    pub fn node_port(&self, i: usize) -> u16 {
        self.nodes[i].ports.plaintext
    }

    /// What the nodes serve besides plaintext.
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    fn admin(&self) -> AdminClient<DefaultClientContext> {
        self.client_config().create().expect("an admin client")
    }

    fn admin_options() -> AdminOptions {
        AdminOptions::new()
            .request_timeout(Some(REQUEST_TIMEOUT))
            .operation_timeout(Some(REQUEST_TIMEOUT))
    }

    /// Creates `name` with `partitions` partitions of `replication`
    /// replicas and the topic `configs`, and waits until every running
    /// node knows a leader for each partition (a producer's first request
    /// may go to any of them).
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication: i32,
        configs: &[(&str, &str)],
    ) {
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(replication));
        for (k, v) in configs {
            topic = topic.set(k, v);
        }
        let results = block_on(self.admin().create_topics([&topic], &Self::admin_options()))
            .unwrap_or_else(|e| panic!("creating topic {name}: {e}"));
        for r in results {
            if let Err((_, code)) = r {
                panic!("creating topic {name}: {code}");
            }
        }
        self.wait_topic(name, |leaders| {
            leaders.is_some_and(|l| l.len() == partitions as usize && l.iter().all(Option::is_some))
        })
        .unwrap_or_else(|why| panic!("topic {name} after its creation: {why}"));
    }

    /// Deletes `name` and waits until no running node lists it.
    pub fn delete_topic(&self, name: &str) {
        let results = block_on(self.admin().delete_topics(&[name], &Self::admin_options()))
            .unwrap_or_else(|e| panic!("deleting topic {name}: {e}"));
        for r in results {
            if let Err((_, code)) = r {
                panic!("deleting topic {name}: {code}");
            }
        }
        self.wait_topic(name, |leaders| leaders.is_none())
            .unwrap_or_else(|why| panic!("topic {name} after its deletion: {why}"));
    }

    /// Waits until every running node's view of `name`'s partition leaders
    /// (`None`: no such topic) passes `ok`.
    fn wait_topic(
        &self,
        name: &str,
        ok: impl Fn(Option<&[Option<usize>]>) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + TOPIC_TIMEOUT;
        for i in (0..self.nodes.len()).filter(|i| self.is_running(*i)) {
            let client = self.node_client(i);
            loop {
                let seen = leaders(&client, name);
                match &seen {
                    Ok(l) if ok(l.as_deref()) => break,
                    _ if Instant::now() >= deadline => {
                        return Err(format!(
                            "node {i} still says {seen:?} after {TOPIC_TIMEOUT:?}"
                        ))
                    }
                    _ => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        }
        Ok(())
    }

    /// Topic `name`'s value for config `key` (its own or the broker's
    /// default), `None` when the key is unknown or has no value.
    pub fn topic_config(&self, name: &str, key: &str) -> Option<String> {
        let resource = ResourceSpecifier::Topic(name);
        let results = block_on(
            self.admin()
                .describe_configs([&resource], &Self::admin_options()),
        )
        .unwrap_or_else(|e| panic!("describing topic {name}'s configs: {e}"));
        let config = match results.into_iter().next() {
            Some(Ok(config)) => config,
            Some(Err(code)) => panic!("describing topic {name}'s configs: {code}"),
            None => panic!("describing topic {name}'s configs: no answer"),
        };
        config.get(key).and_then(|e| e.value.clone())
    }

    /// The node whose broker leads `topic`'s `partition`, as the running
    /// nodes see it (right after a kill they may still name the dead one
    /// until its session times out).
    pub fn leader(&self, topic: &str, partition: i32) -> Option<usize> {
        let client: BaseConsumer = self.client_config().create().expect("a metadata client");
        let leaders = leaders(&client, topic).ok()??;
        leaders
            .get(usize::try_from(partition).ok()?)
            .copied()
            .flatten()
    }

    /// SIGKILL node `i` (a process this cluster started) and reap it.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again on its folder and ports, and waits until every
    /// running node lists its broker again.
    pub fn restart(&mut self, i: usize) {
        assert!(!self.is_running(i), "node {i} runs: kill it first");
        self.nodes[i]
            .spawn(&self.libs)
            .expect("restarting the node");
        self.wait_ready(Instant::now() + READY_TIMEOUT)
            .unwrap_or_else(|why| panic!("node {i} after its restart: {why}"));
    }

    /// Kills every node; dropping the cluster does too.
    pub fn stop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }

    /// Every message of every partition of `topic` up to the end it had
    /// when the read began, ordered by partition and offset: with
    /// `committed_only` the committed ones (`read_committed`, which waits
    /// for open transactions to end), else every stored one, aborted
    /// transactions included.
    pub fn read(&self, topic: &str, committed_only: bool) -> Vec<StoredMessage> {
        read::read_topic(&self.client_config(), topic, committed_only)
    }

    /// Writes one message (not in a transaction) to `partition` of
    /// `topic` and waits until the cluster has it: a test's stand-in for
    /// another writer (a stale position in an offsets topic).
    pub fn produce(&self, topic: &str, partition: i32, key: &[u8], payload: &[u8]) {
        let producer: BaseProducer = self
            .client_config()
            .set("acks", "all")
            .create()
            .expect("a producer");
        producer
            .send(
                rdkafka::producer::BaseRecord::<[u8], [u8]>::to(topic)
                    .partition(partition)
                    .key(key)
                    .payload(payload),
            )
            .map_err(|(e, _)| e)
            .unwrap_or_else(|e| panic!("producing to {topic}/{partition}: {e}"));
        producer
            .flush(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("producing to {topic}/{partition}: {e}"));
    }

    /// Kafka's own producer benchmark into `topic` (which must exist):
    /// `records` records of `record_size` bytes, `acks=all`, idempotent,
    /// compressed with `compression` (`none`, `zstd`, ...).
    pub fn perf_test(
        &self,
        topic: &str,
        records: u64,
        record_size: usize,
        compression: &str,
    ) -> Result<PerfResult, String> {
        perf::run(
            &self.libs,
            &self.log4j2,
            &self.running_bootstrap(),
            topic,
            records,
            record_size,
            compression,
        )
    }

    /// A paced transactional load into `topic` (which must exist) from
    /// this process: `producers` transactional producers offering `rate`
    /// records of `record_size` bytes a second in all, each committing
    /// back to back ([`TransactionalLoad`]).
    pub fn transactional_load(
        &self,
        topic: &str,
        producers: usize,
        rate: f64,
        record_size: usize,
    ) -> Result<TransactionalLoad, String> {
        TransactionalLoad::start(self.client_config(), topic, producers, rate, record_size)
    }

    /// Sets the niceness of every thread of every running node's JVM to
    /// `nice` (`setpriority` per thread: on Linux a process's priority is
    /// each thread's own); threads a JVM starts later inherit it from the
    /// thread that starts them. The bench lowers the brokers' priority to
    /// stand in for brokers on other hosts: on a 2-core machine they would
    /// otherwise take the cores a producer's ack waits for. Raising the
    /// priority again needs CAP_SYS_NICE. Returns how many threads it set.
    pub fn set_nice(&self, nice: i32) -> Result<usize, String> {
        let mut set = 0;
        for node in &self.nodes {
            let Some(pid) = node.pid() else { continue };
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map_err(|e| format!("node {}: /proc/{pid}/task: {e}", node.id))?;
            for task in tasks.flatten() {
                let Some(tid) = task
                    .file_name()
                    .to_str()
                    .and_then(|t| t.parse::<u32>().ok())
                else {
                    continue;
                };
                // SAFETY: setpriority takes plain integers; a thread that
                // ended in between makes it fail with ESRCH.
                let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) };
                if r == 0 {
                    set += 1;
                } else {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::ESRCH) {
                        return Err(format!(
                            "node {} thread {tid}: setpriority {nice}: {e}",
                            node.id
                        ));
                    }
                }
            }
        }
        Ok(set)
    }

    /// Node `i`'s log (warnings and errors), for failure messages.
    pub fn log(&self, i: usize) -> String {
        self.nodes[i].log()
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The broker ids `client`'s node lists, sorted.
fn brokers_seen(client: &BaseConsumer, timeout: Duration) -> Result<Vec<usize>, String> {
    let metadata = client
        .fetch_metadata(None, timeout)
        .map_err(|e| format!("metadata: {e}"))?;
    let mut ids: Vec<usize> = metadata.brokers().iter().map(|b| b.id() as usize).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Each partition's leader of topic `name` as `client` sees it; `None`
/// when the topic does not exist.
fn leaders(client: &BaseConsumer, name: &str) -> Result<Option<Vec<Option<usize>>>, String> {
    let metadata = client
        .fetch_metadata(Some(name), REQUEST_TIMEOUT)
        .map_err(|e| format!("metadata: {e}"))?;
    let Some(topic) = metadata.topics().first() else {
        return Ok(None);
    };
    match topic.error().map(RDKafkaErrorCode::from) {
        None => {}
        Some(RDKafkaErrorCode::UnknownTopicOrPartition) => return Ok(None),
        Some(code) => return Err(format!("topic {name}: {code}")),
    }
    let mut partitions: Vec<_> = topic.partitions().iter().collect();
    partitions.sort_by_key(|p| p.id());
    Ok(Some(
        partitions
            .iter()
            .map(|p| usize::try_from(p.leader()).ok())
            .collect(),
    ))
}
