package dev.spillway.client;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.Comparator;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/** A real spillway daemon on a fresh 0700 temp folder, started for the test run. */
final class TestDaemon {
    static final int PAYLOAD_BYTES_MAX = 1048576;

    final Path dir;
    final Path socket;
    final Path delivered;
    final Path stderr;
    private final Process process;

    private TestDaemon(Path dir, Process process) {
        this.dir = dir;
        this.socket = dir.resolve("spillway.sock");
        this.delivered = dir.resolve("delivered.ndjson");
        this.stderr = dir.resolve("daemon.stderr");
        this.process = process;
    }

    static Path tempDir(String prefix) throws IOException {
        return Files.createTempDirectory(prefix,
            PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
    }

    static TestDaemon start(String bin) throws Exception {
        Path dir = tempDir("spillway-java-");
        String config = "[server]\n"
            + "socket_path = \"" + dir.resolve("spillway.sock") + "\"\n"
            + "data_dir = \"" + dir.resolve("wab") + "\"\n"
            + "shards = 1\n"
            + "payload_bytes_max = " + PAYLOAD_BYTES_MAX + "\n"
            + "[wab]\n"
            + "segment_bytes_max = 4194304\n"
            + "wab_bytes_max = 268435456\n"
            + "[sink]\n"
            + "type = \"file\"\n"
            + "path = \"" + dir.resolve("delivered.ndjson") + "\"\n"
            + "linger_ms = 5\n"
            + "[admin]\n"
            + "socket_path = \"" + dir.resolve("admin.sock") + "\"\n";
        Path cfg = dir.resolve("spillway.toml");
        Files.writeString(cfg, config);
        Process p = new ProcessBuilder(bin, "run", "--config", cfg.toString())
            .redirectOutput(dir.resolve("daemon.stdout").toFile())
            .redirectError(dir.resolve("daemon.stderr").toFile())
            .start();
        TestDaemon d = new TestDaemon(dir, p);
        Runtime.getRuntime().addShutdownHook(new Thread(d::kill));
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        Exception last = null;
        while (System.nanoTime() < deadline) {
            if (!p.isAlive()) {
                throw new IllegalStateException("the daemon exited with code " + p.exitValue()
                    + " before answering; its stderr:\n" + d.stderrText());
            }
            if (Files.exists(d.socket)) {
                ClientOptions o = ClientOptions.defaults().withTimeouts(Duration.ofSeconds(1));
                try (Client c = Client.connect(d.socket, o)) {
                    c.health();
                    return d;
                } catch (SpillwayException e) {
                    last = e;
                }
            }
            Thread.sleep(50);
        }
        d.kill();
        throw new IllegalStateException("the daemon did not answer a HealthCheck within 15 s (last error: " + last
            + "); its stderr:\n" + d.stderrText());
    }

    String stderrText() {
        try {
            return Files.readString(stderr, StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "(cannot read " + stderr + ": " + e + ")";
        }
    }

    ClientOptions options() {
        return ClientOptions.defaults().withTimeouts(Duration.ofSeconds(5)).withPayloadBytesMax(PAYLOAD_BYTES_MAX);
    }

    Client connect() throws SpillwayException {
        return Client.connect(socket, options());
    }

    /** SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit code. */
    int stop() throws InterruptedException {
        process.destroy();
        if (!process.waitFor(10, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            process.waitFor();
        }
        return process.exitValue();
    }

    private void kill() {
        if (process.isAlive()) {
            process.destroyForcibly();
        }
    }

    static void deleteTree(Path dir) {
        try (Stream<Path> s = Files.walk(dir)) {
            s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // best effort
        }
    }
}
