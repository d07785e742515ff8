//! A real Apache Kafka broker (one node in KRaft mode, the release's own jars from Maven
//! Central, built into `tests/kafka/target/lib` by scripts/java-env.sh) on loopback ports of
//! the suite's range, and a producer writing records as Polaris's Kafka listener does.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::ClientConfig;

use super::{ports, unique, until_serving, PATIENCE};

pub struct Kafka {
    child: Option<Child>,
    dir: PathBuf,
    pub port: u16,
    controller: u16,
}

impl Kafka {
    /// A broker with its storage formatted, serving once `start` returns.
    pub async fn start() -> Kafka {
        let dir = std::env::temp_dir().join(unique("kafka"));
        std::fs::create_dir_all(dir.join("data")).expect("kafka directory");
        let mut kafka = Kafka {
            child: None,
            dir,
            port: ports::reserved(),
            controller: ports::reserved(),
        };
        kafka.write_properties();
        let format = Command::new("java")
            .args(kafka.jvm())
            .args(["kafka.tools.StorageTool", "format", "-t"])
            .arg("aWNlY2FjaGUtc3VpdGUxMg")
            .arg("-c")
            .arg(kafka.dir.join("server.properties"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("java runs Kafka's storage tool (scripts/java-env.sh builds its jars)");
        assert!(format.success(), "Kafka's storage formatted");
        kafka.restart().await;
        kafka
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn jvm(&self) -> Vec<String> {
        let lib = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kafka/target/lib/*");
        vec![
            "-Xms64m".into(),
            "-Xmx512m".into(),
            "-XX:+UseSerialGC".into(),
            "-XX:TieredStopAtLevel=1".into(),
            "-cp".into(),
            lib.display().to_string(),
        ]
    }

    fn write_properties(&self) {
        let (port, controller) = (self.port, self.controller);
        let data = self.dir.join("data");
        let text = format!(
            "process.roles=broker,controller\n\
             node.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{controller}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
             log.dirs={}\n\
             offsets.topic.replication.factor=1\n\
             offsets.topic.num.partitions=1\n\
             transaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\n\
             group.initial.rebalance.delay.ms=0\n\
             auto.create.topics.enable=false\n\
             num.network.threads=1\n\
             num.io.threads=2\n",
            data.display()
        );
        std::fs::write(self.dir.join("server.properties"), text).expect("server.properties");
    }

    /// Starts the broker (again) on its ports with the same storage, and waits until it
    /// answers a client.
    pub async fn restart(&mut self) {
        let log = std::fs::File::create(self.dir.join("kafka.log")).expect("kafka log");
        let child = Command::new("java")
            .args(self.jvm())
            .arg("kafka.Kafka")
            .arg(self.dir.join("server.properties"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("java starts the Kafka broker");
        self.child = Some(child);
        let port = self.port;
        let listening = until_serving(&mut self.child, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        let log = || std::fs::read_to_string(self.dir.join("kafka.log")).unwrap_or_default();
        assert!(
            listening,
            "Kafka did not listen on {port}; its log:\n{}",
            log()
        );
        // Listening comes before the broker has joined its own quorum: ready once a client's
        // metadata request is answered.
        let admin = self.admin();
        let start = std::time::Instant::now();
        while admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(2))
            .map_or(true, |m| m.brokers().is_empty())
        {
            assert!(
                start.elapsed() < PATIENCE,
                "Kafka never answered; its log:\n{}",
                log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn admin(&self) -> AdminClient<DefaultClientContext> {
        ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .create()
            .expect("a Kafka admin client")
    }

    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let created = self
            .admin()
            .create_topics(
                &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(PATIENCE)),
            )
            .await
            .expect("topics created");
        for result in created {
            result.expect("the topic created");
        }
    }

    /// A producer that waits for the broker's acknowledgement of each record.
    pub fn producer(&self) -> Publisher {
        Publisher(
            ClientConfig::new()
                .set("bootstrap.servers", self.brokers())
                .set("acks", "all")
                .set("linger.ms", "0")
                .create()
                .expect("a Kafka producer"),
        )
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the broker without closing its connections (SIGSTOP: a hung broker).
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }
}

impl Drop for Kafka {
    fn drop(&mut self) {
        self.thaw();
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub struct Publisher(FutureProducer);

impl Publisher {
    /// Writes one record to `partition`, keyed by a fresh id as Polaris keys its events.
    pub async fn send(&self, topic: &str, partition: i32, payload: &str) {
        let key = unique("event");
        let record = FutureRecord::to(topic)
            .partition(partition)
            .key(&key)
            .payload(payload);
        if let Err((e, _)) = self.0.send(record, PATIENCE).await {
            panic!("the broker did not take a record: {e}");
        }
        let _ = self.0.flush(PATIENCE);
    }
}
