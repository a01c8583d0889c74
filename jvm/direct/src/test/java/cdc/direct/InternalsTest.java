package cdc.direct;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.io.InputStream;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;

/**
 * The Spark and Iceberg internals jvm/direct uses (src/main/resources/cdc/direct/internals.txt)
 * are all still there at the versions jvm/pom.xml pins, and the list names every one its sources do.
 */
class InternalsTest {
  static final String LIST = "cdc/direct/internals.txt";
  static final String REACHED = "reached, not named";
  /** Spark's packages left out of its API documentation: its internals (the list's header). */
  static final List<String> SPARK_INTERNAL = List.of("org.apache.spark.sql.catalyst.", "org.apache.spark.sql.execution.",
      "org.apache.spark.sql.classic.", "org.apache.spark.sql.internal.", "org.apache.spark.unsafe.");
  static final Pattern NAMED = Pattern.compile(
      "\\b(org\\.apache\\.(?:spark|iceberg)(?:\\.[a-z_][A-Za-z0-9_]*)*\\.[A-Z][A-Za-z0-9_$]*)");

  /** The list: class name to why. */
  static Map<String, String> listed() throws IOException {
    Map<String, String> out = new LinkedHashMap<>();
    try (InputStream in = InternalsTest.class.getClassLoader().getResourceAsStream(LIST)) {
      assertThat(in).as(LIST + " on the class path").isNotNull();
      for (String line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
        if (line.isBlank() || line.startsWith("#")) {
          continue;
        }
        String[] parts = line.split("\t", 2);
        assertThat(parts).as("a class name, a tab, why: " + line).hasSize(2);
        assertThat(parts[1].strip()).as("why " + parts[0]).isNotEmpty();
        assertThat(out.put(parts[0].strip(), parts[1].strip())).as("listed twice: " + parts[0]).isNull();
      }
    }
    return out;
  }

  @Test
  void everyListedClassIsThere() throws IOException {
    List<String> missing = new ArrayList<>();
    for (String name : listed().keySet()) {
      try {
        Class.forName(name, false, InternalsTest.class.getClassLoader());
      } catch (ClassNotFoundException | LinkageError e) {
        missing.add(name + " (" + e + ")");
      }
    }
    assertThat(missing)
        .as("Spark or Iceberg internals jvm/direct uses (%s) missing at the pinned versions: adapt the classes "
            + "that use them before this Spark or Iceberg goes on spark.jars", LIST)
        .isEmpty();
  }

  /** The Spark and Iceberg classes jvm/direct's main sources name, comments aside, with the files naming each. */
  static Map<String, TreeSet<String>> named() throws IOException {
    Path sources = Path.of(System.getProperty("basedir", System.getProperty("user.dir")), "src", "main", "java");
    assertThat(sources).isDirectory();
    Map<String, TreeSet<String>> out = new TreeMap<>();
    try (Stream<Path> files = Files.walk(sources)) {
      for (Path file : files.filter(p -> p.toString().endsWith(".java")).toList()) {
        String code = Files.readString(file).replaceAll("(?s)/\\*.*?\\*/", "").replaceAll("//[^\\n]*", "");
        Matcher m = NAMED.matcher(code);
        while (m.find()) {
          out.computeIfAbsent(m.group(1), k -> new TreeSet<>()).add(file.getFileName().toString());
        }
      }
    }
    return out;
  }

  /** Whether {@code name} is outside Spark's or Iceberg's public API, by the list's rule. */
  static boolean internal(String name) throws IOException {
    if (name.startsWith("org.apache.spark.")) {
      return SPARK_INTERNAL.stream().anyMatch(name::startsWith);
    }
    String path = name.replace('.', '/') + ".class";
    for (URL url : Collections.list(InternalsTest.class.getClassLoader().getResources(path))) {
      if (url.getPath().matches(".*/iceberg-api-[^/]*\\.jar!/.*")) {
        return false;
      }
    }
    return true;
  }

  @Test
  void theRuleTellsIcebergsApiFromItsImplementation() throws IOException {
    assertThat(internal("org.apache.iceberg.Table")).as("iceberg-api on the test class path").isFalse();
    assertThat(internal("org.apache.iceberg.expressions.Expressions")).isFalse();
    assertThat(internal("org.apache.iceberg.SerializableTable")).isTrue();
    assertThat(internal("org.apache.iceberg.deletes.BaseDVFileWriter")).isTrue();
    assertThat(internal("org.apache.spark.sql.Dataset")).isFalse();
    assertThat(internal("org.apache.spark.sql.catalyst.InternalRow")).isTrue();
  }

  @Test
  void everyInternalClassTheSourcesNameIsListed() throws IOException {
    Map<String, String> listed = listed();
    List<String> unlisted = new ArrayList<>();
    for (Map.Entry<String, TreeSet<String>> e : named().entrySet()) {
      if (internal(e.getKey()) && !listed.containsKey(e.getKey())) {
        unlisted.add(e.getKey() + " (" + String.join(", ", e.getValue()) + ")");
      }
    }
    assertThat(unlisted).as("internal classes named by jvm/direct's sources and not in %s: list each, with why", LIST)
        .isEmpty();
  }

  @Test
  void everyListedClassIsInternalAndUsed() throws IOException {
    Map<String, TreeSet<String>> named = named();
    List<String> wrong = new ArrayList<>();
    for (Map.Entry<String, String> e : listed().entrySet()) {
      if (!internal(e.getKey())) {
        wrong.add(e.getKey() + ": public API by the list's rule");
      } else if (!named.containsKey(e.getKey()) && !e.getValue().startsWith(REACHED)) {
        wrong.add(e.getKey() + ": named by no source (say '" + REACHED + "' for a class reached through another)");
      }
    }
    assertThat(wrong).as(LIST).isEmpty();
  }
}
