package dev.spillway.client;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The plain test runner: runs every registered test, prints PASS/FAIL for
 * each and a summary line, exits 1 if any failed. Needs SPILLWAY_BIN (the
 * daemon binary); starts one real daemon for the whole run.
 */
public final class TestRunner {
    private static final long TEST_TIMEOUT_S = 30;

    private static final class Case {
        final String name;
        final Check.Body body;

        Case(String name, Check.Body body) {
            this.name = name;
            this.body = body;
        }
    }

    private final List<Case> cases = new ArrayList<>();

    void add(String name, Check.Body body) {
        cases.add(new Case(name, body));
    }

    public static void main(String[] args) throws Exception {
        String bin = System.getenv("SPILLWAY_BIN");
        if (bin == null || bin.isEmpty()) {
            System.err.println("SPILLWAY_BIN is not set: set it to the spillway daemon binary, "
                + "e.g. SPILLWAY_BIN=/path/to/target/release/spillway");
            System.exit(1);
        }
        if (!Files.isRegularFile(Path.of(bin)) || !Files.isExecutable(Path.of(bin))) {
            System.err.println("SPILLWAY_BIN=" + bin + " is not an executable file");
            System.exit(1);
        }
        Path vectors = vectorsFile();
        long t0 = System.nanoTime();
        TestDaemon daemon;
        try {
            daemon = TestDaemon.start(bin);
        } catch (Exception e) {
            System.err.println("FAIL  starting the daemon: " + e.getMessage());
            System.exit(1);
            return;
        }
        System.out.println("daemon started in " + ms(t0) + " ms in " + daemon.dir);
        Path scratch = TestDaemon.tempDir("spillway-java-fake-");

        TestRunner r = new TestRunner();
        VectorTests.register(r, vectors, daemon, scratch);
        DaemonTests.register(r, daemon);
        HostileTests.register(r, scratch);

        int passed = 0;
        List<String> failed = new ArrayList<>();
        ExecutorService pool = Executors.newCachedThreadPool(t -> {
            Thread th = new Thread(t, "test");
            th.setDaemon(true);
            return th;
        });
        for (Case c : r.cases) {
            long start = System.nanoTime();
            Future<?> f = pool.submit(() -> {
                c.body.run();
                return null;
            });
            String error = null;
            Throwable cause = null;
            try {
                f.get(TEST_TIMEOUT_S, TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                f.cancel(true);
                error = "did not finish within " + TEST_TIMEOUT_S + " s (hang)";
            } catch (java.util.concurrent.ExecutionException e) {
                cause = e.getCause();
                error = cause instanceof Check.Failure ? cause.getMessage()
                    : cause.getClass().getSimpleName() + ": " + cause.getMessage();
            }
            if (error == null) {
                passed++;
                System.out.println("PASS  " + c.name + " (" + ms(start) + " ms)");
            } else {
                failed.add(c.name);
                System.out.println("FAIL  " + c.name + ": " + error);
                if (cause != null && !(cause instanceof Check.Failure)) {
                    cause.printStackTrace(System.out);
                } else if (cause != null && cause.getCause() != null) {
                    cause.getCause().printStackTrace(System.out);
                }
            }
        }
        int code = daemon.stop();
        System.out.println("daemon stopped with SIGTERM, exit code " + code);
        if (failed.isEmpty()) {
            TestDaemon.deleteTree(daemon.dir);
            TestDaemon.deleteTree(scratch);
        } else {
            System.out.println("kept for inspection: " + daemon.dir + " (daemon stderr: " + daemon.stderr + ") and "
                + scratch);
            for (String name : failed) {
                System.out.println("failed: " + name);
            }
        }
        System.out.println("java client tests: " + passed + " passed, " + failed.size() + " failed ("
            + r.cases.size() + " total) in " + String.format("%.1f", (System.nanoTime() - t0) / 1e9) + " s");
        System.exit(failed.isEmpty() ? 0 : 1);
    }

    private static long ms(long startNanos) {
        return (System.nanoTime() - startNanos) / 1_000_000;
    }

    /**
     * The conformance vectors, found relative to this test file
     * ({@code clients/java/src/test/java/dev/spillway/client/}): eight folders up
     * is the repository, then {@code protocol/conformance/vectors.json}.
     * run-tests.sh passes the test file's folder as {@code spillway.testDir}.
     */
    private static Path vectorsFile() {
        String testDir = System.getProperty("spillway.testDir");
        if (testDir == null) {
            System.err.println("the system property spillway.testDir (the folder of TestRunner.java) is not set; "
                + "run the tests with clients/java/run-tests.sh");
            System.exit(1);
        }
        Path p = Path.of(testDir).resolve("../../../../../../../../protocol/conformance/vectors.json").normalize();
        if (!Files.isRegularFile(p)) {
            System.err.println("conformance vectors not found at " + p);
            System.exit(1);
        }
        return p;
    }
}
