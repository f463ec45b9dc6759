//! A paced transactional load from this process into the cluster: what a
//! Kafka sink's delivery costs the machine (the client's threads here, the
//! brokers taking the transactions), without a spillway daemon in the
//! path. The bench runs a noop-sink daemon beside it to tell the cost of
//! sharing the machine with a delivering client and its brokers from the
//! cost of the sink inside the daemon.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

/// How long one transactional call (init, commit) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a producer with nothing due sleeps before it looks again.
const IDLE: Duration = Duration::from_millis(1);

/// Producers writing into one topic until [`TransactionalLoad::stop`].
pub struct TransactionalLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<u64, String>>>,
}

impl TransactionalLoad {
    /// `producers` transactional producers (ids `{topic}-load-{i}`), each
    /// offering `rate / producers` records of `record_size` bytes a second
    /// and committing what fell due since its last commit as one
    /// transaction, back to back: the shape of a Kafka sink with one
    /// producer per shard and one batch in flight.
    pub(crate) fn start(
        config: ClientConfig,
        topic: &str,
        producers: usize,
        rate: f64,
        record_size: usize,
    ) -> Result<TransactionalLoad, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let each = rate / producers.max(1) as f64;
        let mut threads = Vec::with_capacity(producers);
        for i in 0..producers {
            let mut config = config.clone();
            config
                .set("transactional.id", format!("{topic}-load-{i}"))
                .set("acks", "all")
                .set("enable.idempotence", "true");
            let producer: BaseProducer = config
                .create()
                .map_err(|e| format!("load producer {i}: {e}"))?;
            producer
                .init_transactions(CALL_TIMEOUT)
                .map_err(|e| format!("load producer {i}: init_transactions: {e}"))?;
            let (topic, stop) = (topic.to_string(), stop.clone());
            threads.push(std::thread::spawn(move || {
                run(&producer, &topic, each, record_size, &stop)
            }));
        }
        Ok(TransactionalLoad { stop, threads })
    }

    /// Stops every producer (each commits its open transaction first) and
    /// returns how many records they committed in all.
    pub fn stop(self) -> Result<u64, String> {
        self.stop.store(true, Ordering::Release);
        let mut total = 0;
        for t in self.threads {
            total += t
                .join()
                .map_err(|_| "a load producer panicked".to_string())??;
        }
        Ok(total)
    }
}

/// One producer's loop: each pass commits every record due by now at
/// `rate` a second in one transaction.
fn run(
    producer: &BaseProducer,
    topic: &str,
    rate: f64,
    record_size: usize,
    stop: &AtomicBool,
) -> Result<u64, String> {
    let payload = vec![b'k'; record_size];
    let started = Instant::now();
    let mut committed = 0u64;
    while !stop.load(Ordering::Acquire) {
        let due = (started.elapsed().as_secs_f64() * rate) as u64;
        if due <= committed {
            std::thread::sleep(IDLE);
            continue;
        }
        producer
            .begin_transaction()
            .map_err(|e| format!("begin_transaction: {e}"))?;
        for _ in committed..due {
            send(producer, topic, &payload)?;
        }
        producer
            .commit_transaction(CALL_TIMEOUT)
            .map_err(|e| format!("commit_transaction: {e}"))?;
        committed = due;
    }
    Ok(committed)
}

/// Queues one record, serving the producer's queue while it is full.
fn send(producer: &BaseProducer, topic: &str, payload: &[u8]) -> Result<(), String> {
    loop {
        match producer.send(BaseRecord::<(), [u8]>::to(topic).payload(payload)) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                producer.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(format!("send: {e}")),
        }
    }
}
