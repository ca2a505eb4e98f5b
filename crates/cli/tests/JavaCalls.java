// What a Java program asks of its sockets, one check each, printed as
// "ok NAME" or "FAIL NAME: why"; the same program runs on the Linux stack
// and under `ixora run` (test `java_programs_behave_as_on_linux`).
//
// The JVM reaches its sockets in ways of its own, which C programs seldom
// use: a channel closed while another thread is blocked in it is first
// dup2'ed over by a socket the JVM keeps closed ("pre-close"), and the
// blocked thread is signalled out of its system call; `Thread.interrupt`
// of a thread blocked in a channel closes the channel so; a Selector
// waits in epoll with an eventfd or pipe of its own beside the sockets,
// which `wakeup()` writes to; `Socket.setSoTimeout` reads wait in poll;
// the JVM's sockets are dual-stack AF_INET6 ones, their IPv4 peers
// v4-mapped.
//
// Usage: java JavaCalls.java ECHO_IP ECHO_PORT SELF_IP SELF_PORT
// (an echo server at ECHO_IP:ECHO_PORT; SELF_IP:SELF_PORT..+4 free for
// the program's own listeners). Exits 1 if any check failed.

import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.DatagramChannel;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Arrays;
import java.util.Iterator;
import java.util.concurrent.atomic.AtomicReference;

public class JavaCalls {
    static int failures = 0;

    static void check(boolean ok, String name, String why) {
        if (ok) {
            System.out.println("ok " + name);
        } else {
            System.out.println("FAIL " + name + ": " + why);
            failures++;
        }
        System.out.flush();
    }

    interface Body {
        void run() throws Exception;
    }

    /** A check whose exception is its failure. */
    static void attempt(String name, Body b) {
        try {
            b.run();
        } catch (Throwable t) {
            check(false, name, t.toString());
        }
    }

    /** Milliseconds since `t0` (System.nanoTime). */
    static long since(long t0) {
        return (System.nanoTime() - t0) / 1_000_000;
    }

    /** A thread running `b`, its throwable (or null) kept in `out`. */
    static Thread start(AtomicReference<Throwable> out, Body b) {
        Thread t = new Thread(() -> {
            try {
                b.run();
            } catch (Throwable e) {
                out.set(e);
            }
        });
        t.start();
        return t;
    }

    public static void main(String[] args) throws Exception {
        InetSocketAddress echo = new InetSocketAddress(args[0], Integer.parseInt(args[1]));
        String self = args[2];
        int port = Integer.parseInt(args[3]);

        // java.net.Socket: connect, write, read back.
        attempt("echo", () -> {
            try (Socket s = new Socket()) {
                s.connect(echo, 5000);
                s.getOutputStream().write("hello java\n".getBytes());
                byte[] b = s.getInputStream().readNBytes(11);
                check(new String(b).equals("hello java\n"), "echo", "read back " + new String(b));
            }
        });

        // A read with SO_TIMEOUT and nothing coming times out (poll with
        // a timeout), and the socket still works after it.
        attempt("so_timeout", () -> {
            try (Socket s = new Socket()) {
                s.connect(echo, 5000);
                s.setSoTimeout(300);
                long t0 = System.nanoTime();
                boolean timedOut = false;
                try {
                    s.getInputStream().read();
                } catch (SocketTimeoutException e) {
                    timedOut = true;
                }
                long ms = since(t0);
                s.getOutputStream().write("x\n".getBytes());
                s.setSoTimeout(5000);
                byte[] b = s.getInputStream().readNBytes(2);
                check(timedOut && ms >= 250 && ms < 3000 && new String(b).equals("x\n"), "so_timeout",
                        "timed out " + timedOut + " after " + ms + " ms; then read " + new String(b));
            }
        });

        // A channel closed while another thread is blocked reading it: the
        // reader ends with AsynchronousCloseException (the JVM dup2s its
        // pre-closed socket over the descriptor and signals the reader).
        attempt("close_ends_blocked_read", () -> {
            SocketChannel c = SocketChannel.open(echo);
            AtomicReference<Throwable> out = new AtomicReference<>();
            Thread t = start(out, () -> c.read(ByteBuffer.allocate(16)));
            Thread.sleep(300);
            long t0 = System.nanoTime();
            c.close();
            t.join(5000);
            check(!t.isAlive() && out.get() instanceof AsynchronousCloseException, "close_ends_blocked_read",
                    "reader alive " + t.isAlive() + ", ended by " + out.get() + " after " + since(t0) + " ms");
        });

        // The same for a thread blocked in accept.
        attempt("close_ends_blocked_accept", () -> {
            ServerSocketChannel l = ServerSocketChannel.open();
            l.bind(new InetSocketAddress(self, port));
            AtomicReference<Throwable> out = new AtomicReference<>();
            Thread t = start(out, () -> l.accept());
            Thread.sleep(300);
            l.close();
            t.join(5000);
            check(!t.isAlive() && out.get() instanceof AsynchronousCloseException, "close_ends_blocked_accept",
                    "acceptor alive " + t.isAlive() + ", ended by " + out.get());
        });

        // Thread.interrupt of a thread blocked reading a channel closes the
        // channel and ends the read with ClosedByInterruptException.
        attempt("interrupt_ends_blocked_read", () -> {
            SocketChannel c = SocketChannel.open(echo);
            AtomicReference<Throwable> out = new AtomicReference<>();
            Thread t = start(out, () -> c.read(ByteBuffer.allocate(16)));
            Thread.sleep(300);
            t.interrupt();
            t.join(5000);
            check(!t.isAlive() && out.get() instanceof ClosedByInterruptException && !c.isOpen(),
                    "interrupt_ends_blocked_read",
                    "reader alive " + t.isAlive() + ", ended by " + out.get() + ", channel open " + c.isOpen());
        });

        // Selector.wakeup from another thread ends a select on sockets
        // with nothing to report.
        attempt("selector_wakeup", () -> {
            try (Selector sel = Selector.open(); SocketChannel c = SocketChannel.open(echo)) {
                c.configureBlocking(false);
                c.register(sel, SelectionKey.OP_READ);
                AtomicReference<Throwable> out = new AtomicReference<>();
                Thread w = start(out, () -> {
                    Thread.sleep(300);
                    sel.wakeup();
                });
                long t0 = System.nanoTime();
                int n = sel.select(10_000);
                long ms = since(t0);
                w.join();
                check(n == 0 && ms >= 250 && ms < 5000, "selector_wakeup", n + " keys after " + ms + " ms");
            }
        });

        // A Selector-driven echo server on the program's own address,
        // one client sending 1 MiB in 8 KiB writes: every byte comes back
        // in order.
        attempt("selector_echo", () -> {
            int n = 1 << 20;
            try (Selector sel = Selector.open(); ServerSocketChannel l = ServerSocketChannel.open()) {
                l.bind(new InetSocketAddress(self, port + 1));
                l.configureBlocking(false);
                l.register(sel, SelectionKey.OP_ACCEPT);
                byte[] sent = new byte[n];
                for (int i = 0; i < n; i++) {
                    sent[i] = (byte) (i * 31 + (i >> 8));
                }
                byte[] got = new byte[n];
                AtomicReference<Throwable> out = new AtomicReference<>();
                int[] read = {0};
                Thread client = start(out, () -> {
                    try (Socket s = new Socket()) {
                        s.connect(new InetSocketAddress(self, port + 1), 5000);
                        s.setSoTimeout(20_000);
                        InputStream in = s.getInputStream();
                        Thread reader = new Thread(() -> {
                            try {
                                int k;
                                while (read[0] < n && (k = in.read(got, read[0], n - read[0])) > 0) {
                                    read[0] += k;
                                }
                            } catch (Exception e) {
                                out.compareAndSet(null, e);
                            }
                        });
                        reader.start();
                        OutputStream o = s.getOutputStream();
                        for (int i = 0; i < n; i += 8192) {
                            o.write(sent, i, Math.min(8192, n - i));
                        }
                        reader.join(30_000);
                    }
                });
                ByteBuffer buf = ByteBuffer.allocate(65536);
                long t0 = System.nanoTime();
                boolean closed = false;
                while (!closed && since(t0) < 30_000) {
                    sel.select(1000);
                    Iterator<SelectionKey> it = sel.selectedKeys().iterator();
                    while (it.hasNext()) {
                        SelectionKey k = it.next();
                        it.remove();
                        if (k.isAcceptable()) {
                            SocketChannel c = l.accept();
                            if (c != null) {
                                c.configureBlocking(false);
                                c.register(sel, SelectionKey.OP_READ);
                            }
                        } else if (k.isReadable()) {
                            SocketChannel c = (SocketChannel) k.channel();
                            buf.clear();
                            int r = c.read(buf);
                            if (r < 0) {
                                c.close();
                                closed = true;
                                continue;
                            }
                            buf.flip();
                            while (buf.hasRemaining()) {
                                // (A full send buffer: wait for room.)
                                if (c.write(buf) == 0) {
                                    Thread.sleep(1);
                                }
                            }
                        }
                    }
                }
                client.join(30_000);
                check(out.get() == null && read[0] == n && Arrays.equals(sent, got), "selector_echo",
                        "read " + read[0] + " of " + n + ", same " + Arrays.equals(sent, got) + ", error " + out.get());
            }
        });

        // shutdownInput from another thread ends a read blocked on the
        // socket: it sees end of stream (the JVM parks the reader in poll;
        // shutdown(SHUT_RD) must wake it).
        attempt("shutdown_input_ends_blocked_read", () -> {
            try (Socket s = new Socket()) {
                s.connect(echo, 5000);
                InputStream in = s.getInputStream();
                int[] r = {-2};
                AtomicReference<Throwable> out = new AtomicReference<>();
                Thread t = start(out, () -> r[0] = in.read());
                Thread.sleep(300);
                long t0 = System.nanoTime();
                s.shutdownInput();
                t.join(5000);
                check(!t.isAlive() && r[0] == -1 && out.get() == null, "shutdown_input_ends_blocked_read",
                        "reader alive " + t.isAlive() + ", read " + r[0] + ", error " + out.get() + " after "
                                + since(t0) + " ms");
            }
        });

        // The addresses of a connection the JVM made (a dual-stack socket:
        // its IPv4 peers v4-mapped in the kernel, plain IPv4 to Java).
        attempt("addresses", () -> {
            try (ServerSocket l = new ServerSocket()) {
                l.bind(new InetSocketAddress(self, port + 2));
                try (Socket c = new Socket()) {
                    c.connect(new InetSocketAddress(self, port + 2), 5000);
                    try (Socket a = l.accept()) {
                        boolean ok = a.getLocalPort() == port + 2
                                && a.getPort() == c.getLocalPort()
                                && c.getPort() == port + 2
                                && a.getInetAddress().getHostAddress().equals(self)
                                && c.getInetAddress().getHostAddress().equals(self)
                                && a.getLocalAddress().getHostAddress().equals(self);
                        check(ok, "addresses", "accepted " + a + " local " + a.getLocalSocketAddress()
                                + "; connected " + c + " local " + c.getLocalSocketAddress());
                    }
                }
            }
        });

        // DatagramChannel: a datagram to itself, its source its own address.
        attempt("datagram_channel", () -> {
            try (DatagramChannel d = DatagramChannel.open()) {
                d.bind(new InetSocketAddress(self, port + 3));
                d.send(ByteBuffer.wrap("dgram".getBytes()), new InetSocketAddress(self, port + 3));
                ByteBuffer b = ByteBuffer.allocate(64);
                d.configureBlocking(true);
                InetSocketAddress from = (InetSocketAddress) d.receive(b);
                b.flip();
                String s = new String(b.array(), 0, b.limit());
                check(s.equals("dgram") && from.getPort() == port + 3
                        && from.getAddress().getHostAddress().equals(self), "datagram_channel",
                        "got '" + s + "' from " + from);
            }
        });

        System.out.println(failures + " failure(s)");
        System.exit(failures == 0 ? 0 : 1);
    }
}
