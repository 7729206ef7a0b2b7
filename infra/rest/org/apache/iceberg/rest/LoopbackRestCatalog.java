/*
 * Iceberg's own REST catalog test server (the one the apache/iceberg-rest-fixture image runs), started on
 * 127.0.0.1 only, for this project's tests and demos. Iceberg's RESTCatalogServer binds every interface and a
 * fixed port; this launcher serves the same adapter (RESTServerCatalogAdapter, which also vends the storage
 * credentials it is configured with when include-credentials=true) on the loopback interface and a free port.
 *
 * It lives in Iceberg's package to reuse the fixture's package-private adapter. Besides the fixture it adds:
 *  - authentication, when configured: REST_CATALOG_TOKEN is the bearer token every request must carry (401
 *    otherwise); REST_CATALOG_CLIENT_ID / REST_CATALOG_CLIENT_SECRET are the OAuth2 client credentials that
 *    /v1/oauth/tokens exchanges for that token (401 for others); REST_CATALOG_READ_TOKEN is a token that may
 *    only read (403 on every write);
 *  - faults, for outage tests: each line of STATE/faults reads "METHOD PATH-REGEX ACTION [skip=N]", ACTION being
 *    status=CODE (answer CODE without handling the request), delay-before=MS, or delay-after=MS (handle the
 *    request, then hold the answer: a client that times out meanwhile cannot know the outcome); skip=N lets the
 *    rule's first N matching requests through (counted from when the file last changed);
 *  - named warehouses, as Polaris and Lakekeeper serve them (Warehouses.java): each STATE/warehouses/NAME
 *    directory is a warehouse with a catalog of its own, asked for with ?warehouse=NAME and served under the
 *    prefix NAME; an unknown name gets 404;
 *  - a required header: with REST_CATALOG_REQUIRED_HEADER="Name: value", every request without it gets 403;
 *  - a request log for tests: while STATE/request-log exists, holding a PATH-REGEX, every POST whose path
 *    matches is appended to STATE/requests.log as one line "POST PATH BODY" (bodies carry no credentials).
 *
 * Usage: java -cp 'rest-jars/*:compactor-rest-catalog.jar' org.apache.iceberg.rest.LoopbackRestCatalog
 *            STATE_DIR WAREHOUSE [PORT]
 * Writes STATE_DIR/rest.port once it answers. Catalog state: STATE_DIR/catalog.db (SQLite). Environment
 * variables CATALOG_<NAME> add catalog properties as the fixture's do (CATALOG_INCLUDE__CREDENTIALS=true ->
 * include-credentials=true). For an s3:// warehouse, AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
 * and AWS_REGION configure S3A (the s3 jar set must be on the class path).
 */
package org.apache.iceberg.rest;

import jakarta.servlet.DispatcherType;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.http.HttpServletRequestWrapper;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.servlet.FilterHolder;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

public class LoopbackRestCatalog {

  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: LoopbackRestCatalog STATE_DIR WAREHOUSE [PORT]");
      System.exit(2);
    }
    Path state = Paths.get(args[0]).toAbsolutePath();
    String warehouse = args[1];
    int port = args.length > 2 ? Integer.parseInt(args[2]) : 0;
    Files.createDirectories(state);

    Map<String, String> properties = new HashMap<>(RCKUtils.environmentCatalogConfig());
    properties.put(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    properties.put(CatalogProperties.URI, "jdbc:sqlite:" + state.resolve("catalog.db"));
    properties.put("jdbc.schema-version", "V1");
    properties.put(CatalogProperties.WAREHOUSE_LOCATION, warehouse);
    Configuration conf = new Configuration();
    if (warehouse.startsWith("s3")) {
      configureS3(conf, properties);
    }
    Catalog catalog = CatalogUtil.buildIcebergCatalog("rest_backend", properties, conf);
    RESTCatalogAdapter adapter =
        new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(catalog, properties));

    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    Warehouses warehouses = new Warehouses(state, warehouse, properties, conf);
    context.addFilter(new FilterHolder(new Gate(state, warehouses)), "/*",
        EnumSet.of(DispatcherType.REQUEST));
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost("127.0.0.1");
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    Path portFile = state.resolve("rest.port");
    Path partial = state.resolve("rest.port.partial");
    Files.write(partial, Integer.toString(connector.getLocalPort()).getBytes(StandardCharsets.UTF_8));
    Files.move(partial, portFile, java.nio.file.StandardCopyOption.ATOMIC_MOVE);
    System.out.println("listening on 127.0.0.1:" + connector.getLocalPort());
    server.join();
  }

  private static void configureS3(Configuration conf, Map<String, String> properties) {
    conf.set("fs.s3.impl", "org.apache.hadoop.fs.s3a.S3AFileSystem");
    conf.set("fs.s3a.path.style.access", "true");
    conf.set("fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider");
    String endpoint = System.getenv("AWS_ENDPOINT_URL");
    if (endpoint != null) {
      conf.set("fs.s3a.endpoint", endpoint);
      conf.set("fs.s3a.connection.ssl.enabled", Boolean.toString(endpoint.startsWith("https")));
      properties.putIfAbsent("s3.endpoint", endpoint);
    }
    String region = System.getenv().getOrDefault("AWS_REGION", "us-east-1");
    conf.set("fs.s3a.endpoint.region", region);
    properties.putIfAbsent("s3.region", region);
    String key = System.getenv("AWS_ACCESS_KEY_ID");
    String secret = System.getenv("AWS_SECRET_ACCESS_KEY");
    if (key != null && secret != null) {
      conf.set("fs.s3a.access.key", key);
      conf.set("fs.s3a.secret.key", secret);
      properties.putIfAbsent("s3.access-key-id", key);
      properties.putIfAbsent("s3.secret-access-key", secret);
    }
    properties.putIfAbsent("s3.path-style-access", "true");
  }

  /** Authentication and injected faults in front of the catalog servlet. */
  static final class Gate implements Filter {
    private final Path faults;
    private final Path logSwitch;
    private final Path requestLog;
    private final String token = System.getenv("REST_CATALOG_TOKEN");
    private final String readToken = System.getenv("REST_CATALOG_READ_TOKEN");
    private final String clientId = System.getenv("REST_CATALOG_CLIENT_ID");
    private final String clientSecret = System.getenv("REST_CATALOG_CLIENT_SECRET");
    private final String requiredHeader = System.getenv("REST_CATALOG_REQUIRED_HEADER");
    private final Warehouses warehouses;
    private final Map<String, AtomicInteger> matches = new ConcurrentHashMap<>();
    private List<String> lastRules = List.of();

    Gate(Path state, Warehouses warehouses) {
      this.faults = state.resolve("faults");
      this.logSwitch = state.resolve("request-log");
      this.requestLog = state.resolve("requests.log");
      this.warehouses = warehouses;
    }

    @Override
    public void init(jakarta.servlet.FilterConfig config) {
      warehouses.setContext(config.getServletContext());
    }

    @Override
    public void doFilter(ServletRequest req, ServletResponse resp, FilterChain chain)
        throws IOException, ServletException {
      HttpServletRequest request = (HttpServletRequest) req;
      HttpServletResponse response = (HttpServletResponse) resp;
      String method = request.getMethod();
      String path = request.getRequestURI();
      long delayAfter = 0;
      for (String rule : faultRules()) {
        String[] parts = rule.trim().split("\\s+");
        if (parts.length < 3 || parts.length > 4 || !parts[0].equalsIgnoreCase(method) || !path.matches(parts[1])) {
          continue;
        }
        if (parts.length == 4 && parts[3].startsWith("skip=")
            && matches.computeIfAbsent(rule, r -> new AtomicInteger()).getAndIncrement()
                < Integer.parseInt(parts[3].substring(5))) {
          continue;
        }
        String[] action = parts[2].split("=", 2);
        long value = Long.parseLong(action[1]);
        if (action[0].equals("status")) {
          error(response, (int) value, "injected fault");
          return;
        } else if (action[0].equals("delay-before")) {
          sleep(value);
        } else if (action[0].equals("delay-after")) {
          delayAfter = value;
        }
      }
      if (requiredHeader != null) {
        String[] header = requiredHeader.split(":", 2);
        if (!header[1].trim().equals(request.getHeader(header[0].trim()))) {
          error(response, 403, "this catalog needs the header " + header[0].trim());
          return;
        }
      }
      if (token != null || clientId != null) {
        if (path.endsWith("/v1/oauth/tokens")) {
          issueToken(request, response);
          return;
        }
        String auth = request.getHeader("Authorization");
        boolean reads = method.equals("GET") || method.equals("HEAD");
        if (auth != null && readToken != null && auth.equals("Bearer " + readToken) && !reads) {
          error(response, 403, "this token may only read");
          return;
        }
        boolean allowed = auth != null && (auth.equals("Bearer " + token)
            || (readToken != null && auth.equals("Bearer " + readToken)));
        if (!allowed) {
          error(response, 401, "missing or invalid bearer token");
          return;
        }
      }
      if (method.equals("POST") && Files.exists(logSwitch)) {
        String pattern = Files.readString(logSwitch, StandardCharsets.UTF_8).trim();
        if (path.matches(pattern)) {
          byte[] body = request.getInputStream().readAllBytes();
          String text = new String(body, StandardCharsets.UTF_8).replace('\n', ' ');
          String line = method + " " + path + " " + text + "\n";
          synchronized (this) {
            Files.writeString(requestLog, line, StandardCharsets.UTF_8, StandardOpenOption.CREATE,
                StandardOpenOption.APPEND);
          }
          req = new ReplayedBody(request, body);
        }
      }
      // delay-after: the answer is kept in memory until the delay is over (Jetty would send a complete answer
      // at once, and only the connection's next request would wait)
      HttpServletResponse answer = delayAfter > 0 ? new Warehouses.Captured(response) : response;
      if (!warehouses.handle((HttpServletRequest) req, answer)) {
        chain.doFilter(req, answer);
      }
      if (delayAfter > 0) {
        sleep(delayAfter);
        byte[] body = ((Warehouses.Captured) answer).body();
        response.setContentLength(body.length);
        response.getOutputStream().write(body);
      }
    }

    private synchronized List<String> faultRules() throws IOException {
      List<String> rules = Files.exists(faults) ? Files.readAllLines(faults, StandardCharsets.UTF_8) : List.of();
      if (!rules.equals(lastRules)) {  // new rules: their skip counts start again
        matches.clear();
        lastRules = rules;
      }
      return rules;
    }

    private void issueToken(HttpServletRequest request, HttpServletResponse response) throws IOException {
      Map<String, String> form = new HashMap<>();
      String body = new String(request.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      for (String pair : body.split("&")) {
        String[] kv = pair.split("=", 2);
        if (kv.length == 2) {
          form.put(URLDecoder.decode(kv[0], StandardCharsets.UTF_8),
              URLDecoder.decode(kv[1], StandardCharsets.UTF_8));
        }
      }
      String basic = request.getHeader("Authorization");  // RFC 6749 lets clients send them as Basic auth too
      if (basic != null && basic.startsWith("Basic ")) {
        String[] pair = new String(java.util.Base64.getDecoder().decode(basic.substring(6).trim()),
            StandardCharsets.UTF_8).split(":", 2);
        if (pair.length == 2) {
          form.putIfAbsent("client_id", URLDecoder.decode(pair[0], StandardCharsets.UTF_8));
          form.putIfAbsent("client_secret", URLDecoder.decode(pair[1], StandardCharsets.UTF_8));
        }
      }
      if (clientId == null || !clientId.equals(form.get("client_id"))
          || !String.valueOf(clientSecret).equals(form.get("client_secret"))) {
        response.setStatus(401);
        response.setContentType("application/json");
        response.getWriter().write("{\"error\":\"invalid_client\",\"error_description\":\"bad client credentials\"}");
        return;
      }
      response.setStatus(200);
      response.setContentType("application/json");
      response.getWriter().write("{\"access_token\":\"" + token + "\",\"token_type\":\"bearer\","
          + "\"issued_token_type\":\"urn:ietf:params:oauth:token-type:access_token\",\"expires_in\":3600}");
    }

    static void error(HttpServletResponse response, int code, String message) throws IOException {
      response.setStatus(code);
      response.setContentType("application/json");
      String type = code == 401 ? "NotAuthorizedException" : code == 403 ? "ForbiddenException"
          : code == 400 ? "BadRequestException" : code == 404 ? "NoSuchWarehouseException"
          : "ServiceUnavailableException";
      response.getWriter().write("{\"error\":{\"message\":\"" + message + "\",\"type\":\"" + type
          + "\",\"code\":" + code + "}}");
    }

    private static void sleep(long millis) {
      try {
        Thread.sleep(millis);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** A request whose body was read already, served again from memory. */
  static final class ReplayedBody extends HttpServletRequestWrapper {
    private final byte[] body;

    ReplayedBody(HttpServletRequest request, byte[] body) {
      super(request);
      this.body = body;
    }

    @Override
    public ServletInputStream getInputStream() {
      ByteArrayInputStream in = new ByteArrayInputStream(body);
      return new ServletInputStream() {
        @Override
        public int read() {
          return in.read();
        }

        @Override
        public int read(byte[] buffer, int offset, int length) {
          return in.read(buffer, offset, length);
        }

        @Override
        public boolean isFinished() {
          return in.available() == 0;
        }

        @Override
        public boolean isReady() {
          return true;
        }

        @Override
        public void setReadListener(ReadListener listener) {
          throw new UnsupportedOperationException();
        }
      };
    }

    @Override
    public java.io.BufferedReader getReader() {
      return new java.io.BufferedReader(new java.io.InputStreamReader(getInputStream(), StandardCharsets.UTF_8));
    }
  }
}
