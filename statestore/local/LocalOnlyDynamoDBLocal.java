import java.io.InputStream;
import java.lang.reflect.Field;
import java.net.URI;
import java.util.Locale;

import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Handler;
import org.eclipse.jetty.server.Request;
import org.eclipse.jetty.server.Response;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.util.Callback;

import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

/**
 * DynamoDB Local for this machine only, owned by the process that started it.
 *
 * <p>DynamoDBLocal.jar has no option to choose its interface: its Jetty server listens on all of them and
 * accepts any signature, so anyone who can reach the machine could read and change every table. This
 * launcher builds the server as the jar's own main class does (same command-line options), then, before
 * starting it, sets its connector's host (the system property {@code statestore.host}, 127.0.0.1 by
 * default) and puts a handler in front that refuses (403) a request whose {@code Host} is not a loopback
 * name, so a web page cannot reach it by rebinding a DNS name, or whose {@code Origin} is not a loopback
 * origin, so a web page cannot call it from the browser of the machine's user.
 *
 * <p>It also exits when its standard input reaches end of file. The process that starts it holds the only
 * write end of that pipe, and the kernel closes it however that process ends ({@code kill -9} included),
 * so DynamoDB Local never outlives its owner and never keeps the owner's port or data directory.
 *
 * <p>statestore compiles this file once, against the DynamoDBLocal.jar it runs, into its user cache.
 */
public final class LocalOnlyDynamoDBLocal {
    private static final long EXIT_GRACE_MILLIS = 10_000;

    private LocalOnlyDynamoDBLocal() {}

    public static void main(String[] args) throws Exception {
        String host = System.getProperty("statestore.host", "127.0.0.1");
        exitWhenStandardInputCloses();
        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
        Field field = DynamoDBProxyServer.class.getDeclaredField("server");
        field.setAccessible(true);
        Server server = (Server) field.get(proxy);
        for (Connector connector : server.getConnectors()) {
            ((ServerConnector) connector).setHost(host);
        }
        server.setHandler(new LocalOnly(server.getHandler(), host));
        proxy.start();
        System.out.println("statestore: DynamoDB Local listens on " + host + " only");
    }

    private static void exitWhenStandardInputCloses() {
        Thread watcher = new Thread(() -> {
            try {
                InputStream in = System.in;
                byte[] buffer = new byte[256];
                while (in.read(buffer) != -1) {
                    // nothing is sent: only the end of the stream matters
                }
            } catch (Exception e) {
                // a broken pipe means the same: the owner is gone
            }
            Thread halt = new Thread(() -> {
                try {
                    Thread.sleep(EXIT_GRACE_MILLIS);
                } catch (InterruptedException e) {
                    // exit now
                }
                Runtime.getRuntime().halt(1);
            }, "statestore-halt");
            halt.setDaemon(true);
            halt.start();
            System.exit(0);
        }, "statestore-owner-watch");
        watcher.setDaemon(true);
        watcher.start();
    }

    /** Refuses requests not addressed to this machine by name, or sent by a web page of another origin. */
    static final class LocalOnly extends Handler.Wrapper {
        private final String boundHost;

        LocalOnly(Handler handler, String boundHost) {
            super(handler);
            this.boundHost = boundHost.toLowerCase(Locale.ROOT);
        }

        @Override
        public boolean handle(Request request, Response response, Callback callback) throws Exception {
            String host = request.getHeaders().get("Host");
            if (host != null && !isLocalHost(hostOfAuthority(host))) {
                Response.writeError(request, response, callback, 403,
                    "this DynamoDB Local serves this machine only: Host " + host + " refused");
                return true;
            }
            String origin = request.getHeaders().get("Origin");
            if (origin != null && !isLocalOrigin(origin)) {
                Response.writeError(request, response, callback, 403,
                    "this DynamoDB Local serves this machine only: Origin " + origin + " refused");
                return true;
            }
            return super.handle(request, response, callback);
        }

        private boolean isLocalHost(String name) {
            String host = name.toLowerCase(Locale.ROOT);
            if (host.startsWith("[") && host.endsWith("]")) {
                host = host.substring(1, host.length() - 1);
            }
            return host.equals("localhost") || host.endsWith(".localhost") || host.equals("::1")
                || host.matches("127\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}") || host.equals(boundHost);
        }

        private boolean isLocalOrigin(String origin) {
            try {
                URI uri = new URI(origin);
                String scheme = uri.getScheme();
                return uri.getHost() != null && ("http".equals(scheme) || "https".equals(scheme))
                    && isLocalHost(uri.getHost());
            } catch (Exception e) {
                return false; // "null" and anything unparsable: not a page of this machine
            }
        }

        private static String hostOfAuthority(String authority) {
            if (authority.startsWith("[")) {
                int end = authority.indexOf(']');
                return end < 0 ? authority : authority.substring(0, end + 1);
            }
            int colon = authority.lastIndexOf(':');
            return colon < 0 ? authority : authority.substring(0, colon);
        }
    }
}
