package dev.spillway.client;

import java.util.Arrays;
import java.util.Objects;

/** Assertions for the plain test runner. */
final class Check {
    private Check() {
    }

    interface Body {
        void run() throws Exception;
    }

    static final class Failure extends AssertionError {
        private static final long serialVersionUID = 1L;

        Failure(String message) {
            super(message);
        }
    }

    static void fail(String message) {
        throw new Failure(message);
    }

    static void isTrue(boolean cond, String message) {
        if (!cond) {
            fail(message);
        }
    }

    static void eq(Object expected, Object actual, String what) {
        if (!Objects.equals(expected, actual)) {
            fail(what + ": expected <" + expected + ">, got <" + actual + ">");
        }
    }

    static void bytesEq(byte[] expected, byte[] actual, String what) {
        if (!Arrays.equals(expected, actual)) {
            fail(what + ":\n  expected " + hex(expected) + "\n  got      " + hex(actual));
        }
    }

    /** Runs {@code body}, which must throw {@code type} (not a subclass of a different kind); returns it. */
    static <T extends Throwable> T raises(Class<T> type, Body body) {
        try {
            body.run();
        } catch (Throwable t) {
            if (type.isInstance(t)) {
                return type.cast(t);
            }
            Failure f = new Failure("expected " + type.getSimpleName() + ", got " + t.getClass().getSimpleName()
                + ": " + t.getMessage());
            f.initCause(t);
            throw f;
        }
        fail("expected " + type.getSimpleName() + ", but nothing was thrown");
        return null;
    }

    static void contains(String haystack, String needle, String what) {
        if (haystack == null || !haystack.contains(needle)) {
            fail(what + ": expected <" + haystack + "> to contain <" + needle + ">");
        }
    }

    static String hex(byte[] b) {
        if (b == null) {
            return "null";
        }
        StringBuilder s = new StringBuilder();
        for (byte x : b) {
            s.append(String.format("%02x", x & 0xff));
        }
        return s.toString();
    }

    static byte[] unhex(String s) {
        if (s.length() % 2 != 0) {
            throw new IllegalArgumentException("odd-length hex: " + s);
        }
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return b;
    }
}
