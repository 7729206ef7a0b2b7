/*
 * Named warehouses for the loopback REST catalog, as Apache Polaris and Lakekeeper serve them: each directory
 * STATE/warehouses/NAME (made by a test, as an administrator makes a catalog) is a warehouse with a catalog of
 * its own (SQLite STATE/warehouses/NAME/catalog.db, tables under WAREHOUSE/NAME).
 *
 * A client asks for one with GET /v1/config?warehouse=NAME and is told the prefix NAME (overrides.prefix), so
 * its requests come as /v1/NAME/...; those are served by that warehouse's catalog with the prefix removed (the
 * fixture's adapter knows no prefix). An unknown name gets 404. Without ?warehouse= the server's own catalog
 * answers, as before.
 */
package org.apache.iceberg.rest;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import jakarta.servlet.ServletConfig;
import jakarta.servlet.ServletContext;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collections;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Pattern;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;

final class Warehouses {
  private static final Pattern NAME = Pattern.compile("[A-Za-z0-9_-]+");
  private static final ObjectMapper JSON = new ObjectMapper();

  private final Path root;
  private final String location;
  private final Map<String, String> properties;
  private final Configuration conf;
  private final Map<String, RESTCatalogServlet> servlets = new ConcurrentHashMap<>();
  private volatile ServletContext context;

  Warehouses(Path state, String location, Map<String, String> properties, Configuration conf) {
    this.root = state.resolve("warehouses");
    this.location = location.endsWith("/") ? location : location + "/";
    this.properties = properties;
    this.conf = conf;
  }

  void setContext(ServletContext servletContext) {
    this.context = servletContext;
  }

  /** Serves a request for a named warehouse; false if the request names none (the default catalog's). */
  boolean handle(HttpServletRequest request, HttpServletResponse response) throws IOException, ServletException {
    String path = request.getRequestURI();
    if (path.equals("/v1/config") && request.getParameter("warehouse") != null) {
      String name = request.getParameter("warehouse");
      if (!exists(name)) {
        LoopbackRestCatalog.Gate.error(response, 404, "Unable to find warehouse " + name);
        return true;
      }
      Captured captured = new Captured(response);
      servlet(name).service(request, captured);
      ObjectNode config = (ObjectNode) JSON.readTree(captured.body());
      ObjectNode overrides = config.has("overrides") && config.get("overrides").isObject()
          ? (ObjectNode) config.get("overrides") : config.putObject("overrides");
      overrides.put("prefix", name);
      byte[] body = JSON.writeValueAsBytes(config);
      response.setStatus(200);
      response.setContentType("application/json");
      response.setContentLength(body.length);
      response.getOutputStream().write(body);
      return true;
    }
    String[] parts = path.split("/", 4);  // "", "v1", NAME, rest
    if (parts.length == 4 && parts[1].equals("v1") && exists(parts[2])) {
      servlet(parts[2]).service(new Unprefixed(request, "/v1/" + parts[3]), response);
      return true;
    }
    return false;
  }

  private boolean exists(String name) {
    return NAME.matcher(name).matches() && Files.isDirectory(root.resolve(name));
  }

  private RESTCatalogServlet servlet(String name) throws ServletException {
    RESTCatalogServlet servlet = servlets.get(name);
    if (servlet == null) {
      synchronized (this) {
        servlet = servlets.get(name);
        if (servlet == null) {
          servlet = build(name);
          servlets.put(name, servlet);
        }
      }
    }
    return servlet;
  }

  private RESTCatalogServlet build(String name) throws ServletException {
    Map<String, String> own = new HashMap<>(properties);
    own.put(CatalogProperties.URI, "jdbc:sqlite:" + root.resolve(name).resolve("catalog.db"));
    own.put(CatalogProperties.WAREHOUSE_LOCATION, location + name);
    Catalog catalog = CatalogUtil.buildIcebergCatalog("rest_backend_" + name, own, conf);
    RESTCatalogServlet servlet =
        new RESTCatalogServlet(new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(catalog, own)));
    ServletContext servletContext = context;
    servlet.init(new ServletConfig() {
      @Override
      public String getServletName() {
        return "warehouse-" + name;
      }

      @Override
      public ServletContext getServletContext() {
        return servletContext;
      }

      @Override
      public String getInitParameter(String parameter) {
        return null;
      }

      @Override
      public Enumeration<String> getInitParameterNames() {
        return Collections.emptyEnumeration();
      }
    });
    return servlet;
  }

  /** A request with the warehouse prefix taken out of its path. */
  static final class Unprefixed extends HttpServletRequestWrapper {
    private final String path;

    Unprefixed(HttpServletRequest request, String path) {
      super(request);
      this.path = path;
    }

    @Override
    public String getRequestURI() {
      return path;
    }

    @Override
    public String getPathInfo() {
      return path;
    }

    @Override
    public String getServletPath() {
      return "";
    }
  }

  /** A response whose body is kept in memory (the config answer, to add the prefix to). */
  static final class Captured extends HttpServletResponseWrapper {
    private final ByteArrayOutputStream buffer = new ByteArrayOutputStream();
    private PrintWriter writer;

    Captured(HttpServletResponse response) {
      super(response);
    }

    byte[] body() {
      if (writer != null) {
        writer.flush();
      }
      return buffer.toByteArray();
    }

    @Override
    public ServletOutputStream getOutputStream() {
      return new ServletOutputStream() {
        @Override
        public void write(int b) {
          buffer.write(b);
        }

        @Override
        public boolean isReady() {
          return true;
        }

        @Override
        public void setWriteListener(WriteListener listener) {
          throw new UnsupportedOperationException();
        }
      };
    }

    @Override
    public PrintWriter getWriter() {
      if (writer == null) {
        writer = new PrintWriter(new OutputStreamWriter(buffer, StandardCharsets.UTF_8));
      }
      return writer;
    }

    @Override
    public void setContentLength(int length) {
    }

    @Override
    public void setContentLengthLong(long length) {
    }
  }
}
