//! One node of the cluster: a combined broker and controller
//! (`process.roles=broker,controller`) in its own folder, with its
//! `server.properties`, its storage formatted by Kafka's storage tool, and
//! the JVM that runs it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::Guard;

/// The cluster id every node is formatted with: any 16 bytes in base64url
/// (here "spillway--kafka!"); each cluster lives in its own folders, so
/// one fixed id is enough and saves a JVM run of `random-uuid`.
const CLUSTER_ID: &str = "c3BpbGx3YXktLWthZmthIQ";

/// The broker's JVM options: a small fixed heap (three nodes share two
/// cores and the tests' own processes), G1 tuned as Kafka's
/// `kafka-run-class.sh` does.
const BROKER_JVM: &[&str] = &[
    "-Xms256m",
    "-Xmx256m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
];

/// The storage tool's JVM: it runs for a second, so C1 only and the
/// serial collector (they start faster).
const TOOL_JVM: &[&str] = &["-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"];

/// Broker settings shared by every node: a durable, transactional cluster
/// that notices a killed node within seconds.
const BROKER_SETTINGS: &str = "\
# Every write is on 3 replicas and acknowledged by at least 2; no replica
# that missed writes becomes leader.
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
unclean.leader.election.enable=false
num.partitions=3
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
# Few partitions for the internal topics: made on the first transaction or
# group, 50 each by default, which takes seconds on 2 cores.
offsets.topic.num.partitions=3
transaction.state.log.num.partitions=3
# A killed node is fenced (and leaves every ISR) after 3 s without a
# heartbeat (default 9 s); the controllers elect a new leader among
# themselves within 1 to 2 s (the defaults, kept in sight).
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500
controller.quorum.election.timeout.ms=1000
controller.quorum.fetch.timeout.ms=2000
replica.lag.time.max.ms=10000
# Threads for 2 cores, not 8+.
num.network.threads=2
num.io.threads=4
num.replica.fetchers=1
background.threads=4
log.cleaner.threads=1
num.recovery.threads.per.data.dir=1
";

/// The log4j2 configuration every JVM gets: warnings and errors only, plus
/// the line that says a node started, on stdout (the node's log file).
const LOG4J2: &str = "\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
";

/// A node's loopback ports. Inter-broker and controller traffic use the
/// plaintext and controller listeners.
#[derive(Debug, Clone)]
pub(crate) struct Ports {
    pub plaintext: u16,
    pub controller: u16,
    /// The `SSL` listener, when the guard has TLS.
    pub tls: Option<u16>,
    /// The `SASL_PLAINTEXT` listener (SCRAM and PLAIN), when the guard has
    /// a user.
    pub sasl: Option<u16>,
}

/// One node; see the module documentation.
pub(crate) struct Node {
    /// Its `node.id`, also its index in the cluster.
    pub id: usize,
    pub ports: Ports,
    pub properties: PathBuf,
    /// The JVM's stdout and stderr.
    pub log: PathBuf,
    /// `-Dlog4j2.configurationFile=...`, from [`write_log4j2`].
    pub log4j2: String,
    /// The JVM, while it runs; `None` once killed.
    pub child: Option<Child>,
}

impl Node {
    /// Writes the node's folder and `server.properties` under `root`.
    /// `voters` is the static controller quorum, `controller.quorum.voters`
    /// syntax.
    pub fn create(
        root: &Path,
        id: usize,
        ports: Ports,
        voters: &str,
        guard: &Guard,
        log4j2: &str,
    ) -> Result<Node, String> {
        let dir = root.join(format!("node{id}"));
        fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let properties = dir.join("server.properties");
        let text = server_properties(id, &ports, voters, &dir.join("data"), guard);
        fs::write(&properties, text).map_err(|e| e.to_string())?;
        Ok(Node {
            id,
            ports,
            properties,
            log: dir.join("kafka.log"),
            log4j2: log4j2.to_string(),
            child: None,
        })
    }

    /// Starts the storage tool that formats this node's log folder; the
    /// caller waits for it (the nodes are formatted in parallel). A static
    /// quorum (`controller.quorum.voters`) needs none of 4.x's
    /// `--standalone`/`--initial-controllers` flags, which are for a
    /// dynamic quorum (`controller.quorum.bootstrap.servers`). The guard's
    /// user gets its SCRAM credentials here: they go into the bootstrap
    /// metadata, so no admin call is needed once the cluster runs.
    pub fn start_format(&self, libs: &Path, guard: &Guard) -> Result<Child, String> {
        let mut cmd = Command::new("java");
        cmd.args(TOOL_JVM)
            .arg("-cp")
            .arg(class_path(libs))
            .arg(&self.log4j2)
            .args(["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c"])
            .arg(&self.properties);
        if let Some(user) = &guard.scram {
            for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
                cmd.arg("--add-scram").arg(format!(
                    "{mechanism}=[name={},password={}]",
                    user.name, user.password
                ));
            }
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running java (the storage tool): {e}"))
    }

    /// Starts the node's JVM, its output appended to its log.
    pub fn spawn(&mut self, libs: &Path) -> Result<(), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| e.to_string())?;
        let child = Command::new("java")
            .args(BROKER_JVM)
            .arg(&self.log4j2)
            .arg("-cp")
            .arg(class_path(libs))
            .arg("kafka.Kafka")
            .arg(&self.properties)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting java (node {}): {e}", self.id))?;
        self.child = Some(child);
        Ok(())
    }

    /// Whether the JVM has exited since it was started (or was never).
    pub fn exited(&mut self) -> Option<String> {
        match self.child.as_mut().map(|c| c.try_wait()) {
            None => Some("not started".to_string()),
            Some(Ok(Some(status))) => Some(status.to_string()),
            Some(Ok(None)) => None,
            Some(Err(e)) => Some(e.to_string()),
        }
    }

    /// SIGKILL the JVM (a process this node started) and reap it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The JVM's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// Every jar of the folder; the JVM expands the `*` itself.
pub(crate) fn class_path(libs: &Path) -> String {
    format!("{}/*", libs.display())
}

/// Writes the log4j2 configuration every JVM of a cluster reads into the
/// cluster's folder and returns the JVM option that names it.
pub(crate) fn write_log4j2(root: &Path) -> Result<String, String> {
    let path = root.join("log4j2.properties");
    fs::write(&path, LOG4J2).map_err(|e| e.to_string())?;
    Ok(format!("-Dlog4j2.configurationFile={}", path.display()))
}

fn server_properties(id: usize, ports: &Ports, voters: &str, data: &Path, guard: &Guard) -> String {
    let mut listeners = vec![
        format!("PLAINTEXT://127.0.0.1:{}", ports.plaintext),
        format!("CONTROLLER://127.0.0.1:{}", ports.controller),
    ];
    let mut advertised = vec![format!("PLAINTEXT://127.0.0.1:{}", ports.plaintext)];
    if let Some(p) = ports.tls {
        listeners.push(format!("SSL://127.0.0.1:{p}"));
        advertised.push(format!("SSL://127.0.0.1:{p}"));
    }
    if let Some(p) = ports.sasl {
        listeners.push(format!("SASL_PLAINTEXT://127.0.0.1:{p}"));
        advertised.push(format!("SASL_PLAINTEXT://127.0.0.1:{p}"));
    }
    let mut text = format!(
        "node.id={id}
process.roles=broker,controller
listeners={}
advertised.listeners={}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
controller.quorum.voters={voters}
log.dirs={}
{BROKER_SETTINGS}",
        listeners.join(","),
        advertised.join(","),
        data.display()
    );
    if let Some(tls) = &guard.tls {
        // Kafka's PEM key store: the unencrypted PKCS#8 key and the chain
        // in one file, and no `ssl.key.password` (it would expect an
        // encrypted key).
        text.push_str(&format!(
            "ssl.keystore.type=PEM\nssl.keystore.location={}\nssl.client.auth=none\n",
            tls.key_and_cert.display()
        ));
    }
    if let Some(user) = &guard.scram {
        // SCRAM users live in the metadata log (added at format time);
        // PLAIN's live in its JAAS line.
        text.push_str(&format!(
            "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_{}=\"{}\";
",
            user.name, user.password
        ));
    }
    text
}
