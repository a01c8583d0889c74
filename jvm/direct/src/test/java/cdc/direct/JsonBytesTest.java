package cdc.direct;

import static org.assertj.core.api.Assertions.assertThat;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.json.JsonToStructsEvaluator;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/** JsonBytes reads a record's bytes as Spark's from_json reads its text: its values, and Spark's own
 * result wherever its byte parser does not read the record. */
class JsonBytesTest {
  static final String DDL = "id BIGINT, name STRING, amount DECIMAL(10,2), ratio DOUBLE, ok BOOLEAN, "
      + "tags ARRAY<STRING>, inner STRUCT<a: INT, b: ARRAY<STRUCT<c: STRING>>>, attrs MAP<STRING, INT>";

  static JsonBytes of(String ddl, String... heads) {
    return new JsonBytes(DataType.fromDDL(ddl), Map.of(), List.of(heads), "test");
  }

  /** Spark's own from_json of {@code text} with {@code ddl}, as JsonBytes builds it. */
  static Object spark(String ddl, String text) {
    SQLConf conf = SQLConf.get();
    JsonToStructsEvaluator evaluator = new JsonToStructsEvaluator(
        scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(Map.<String, String>of())),
        DataType.fromDDL(ddl).asNullable(), conf.columnNameOfCorruptRecord(), Option.apply(conf.sessionLocalTimeZone()),
        (Boolean) conf.getConf(SQLConf.VARIANT_ALLOW_DUPLICATE_KEYS()));
    return plain(evaluator.evaluate(UTF8String.fromString(text)), DataType.fromDDL(ddl));
  }

  static Object bytes(String ddl, String text) {
    return plain(of(ddl).read(text.getBytes(StandardCharsets.UTF_8)), DataType.fromDDL(ddl));
  }

  /** A result as plain Java values, comparable with equals. */
  static Object plain(Object v, DataType type) {
    if (v == null) {
      return null;
    }
    if (type instanceof StructType s) {
      InternalRow row = (InternalRow) v;
      List<Object> out = new ArrayList<>();
      StructField[] fields = s.fields();
      for (int i = 0; i < fields.length; i++) {
        out.add(row.isNullAt(i) ? null : plain(row.get(i, fields[i].dataType()), fields[i].dataType()));
      }
      return out;
    }
    if (type instanceof ArrayType a) {
      ArrayData array = (ArrayData) v;
      List<Object> out = new ArrayList<>();
      for (int i = 0; i < array.numElements(); i++) {
        out.add(array.isNullAt(i) ? null : plain(array.get(i, a.elementType()), a.elementType()));
      }
      return out;
    }
    if (type instanceof MapType m) {
      MapData map = (MapData) v;
      return List.of(plain(map.keyArray(), new ArrayType(m.keyType(), false)),
                     plain(map.valueArray(), new ArrayType(m.valueType(), true)));
    }
    if (v instanceof UTF8String u) {
      return u.toString();
    }
    if (v instanceof Decimal d) {
      return d.toJavaBigDecimal();
    }
    return v;
  }

  @Test
  void readsValuesNullsAndNesting() {
    String text = "{\"id\": 9007199254740993, \"name\": null, \"amount\": -12.5, \"ratio\": 1.5e3, \"ok\": true,"
        + " \"tags\": [\"x\", null, \"z\"], \"inner\": {\"a\": 7, \"b\": [{\"c\": \"deep\"}, {\"c\": null}]},"
        + " \"attrs\": {\"k\": 1}}";
    assertThat(bytes(DDL, text)).isEqualTo(Arrays.asList(
        9007199254740993L, null, new BigDecimal("-12.50"), 1500.0, true, Arrays.asList("x", null, "z"),
        Arrays.asList(7, Arrays.asList(Arrays.asList("deep"), Arrays.asList((Object) null))),
        List.of(List.of("k"), List.of(1))))
        .isEqualTo(spark(DDL, text));
  }

  @Test
  void readsEscapesAndUnicode() {
    String text = "{\"name\": \"q\\\"b\\\\s\\/n\\n t\\t u\\u00e9 \\ud83d\\ude00 é 日本 😀\"}";
    assertThat(bytes("name STRING", text))
        .isEqualTo(List.of("q\"b\\s/n\n t\t u\u00e9 \ud83d\ude00 é 日本 😀"))
        .isEqualTo(spark("name STRING", text));
  }

  @Test
  void readsAMissingFieldAndAnUnknownOneAsNull() {
    assertThat(bytes("id BIGINT, name STRING", "{\"other\": [1, {\"x\": 2}], \"id\": 3}"))
        .isEqualTo(Arrays.asList(3L, null));
  }

  @Test
  void readsAnArrayOfRecords() {
    String text = "[{\"id\": 1}, {\"id\": 2}]";
    assertThat(bytes("ARRAY<STRUCT<id: BIGINT>>", text)).isEqualTo(List.of(List.of(1L), List.of(2L)))
        .isEqualTo(spark("ARRAY<STRUCT<id: BIGINT>>", text));
  }

  @Test
  void aRecordItCannotReadIsSparksOwnResult() {
    for (String text : List.of("{\"id\": 1", "{\"id\": }", "not json", "", "1", "\"s\"", "{\"id\": \"x\"}",
                               "{\"id\": 1} trailing", "{\"amount\": 1e400}", "{\"id\": 99999999999999999999}",
                               "\uFEFF{\"id\": 1}", "[1, 2]", "{\"ok\": \"true\"}", "{\"tags\": \"x\"}")) {
      assertThat(bytes(DDL, text)).as(text).isEqualTo(spark(DDL, text));
    }
  }

  @Test
  void bytesThatAreNotUtf8AreReadAsSparkDecodesThem() {
    byte[] bad = {'{', '"', 'n', 'a', 'm', 'e', '"', ':', '"', (byte) 0xC0, (byte) 0x80, (byte) 0xFF, '"', '}'};
    Object read = plain(of("name STRING").read(bad), DataType.fromDDL("name STRING"));
    assertThat(read).isEqualTo(spark("name STRING", new String(bad, StandardCharsets.UTF_8)));
  }

  @Test
  void onlyWellFormedUtf8ObjectsAndArraysArePlain() {
    assertThat(plain("{}")).isTrue();
    assertThat(plain("[1]")).isTrue();
    assertThat(plain("{\"é\": \"日本😀\"}")).isTrue();
    assertThat(plain("1")).isFalse();
    assertThat(plain("{")).isFalse();
    assertThat(plain(" {}")).isFalse();
    assertThat(plain(new byte[] {'{', 0, '"', 0})).as("UTF-16").isFalse();
    assertThat(plain(new byte[] {(byte) 0xEF, (byte) 0xBB, (byte) 0xBF, '{', '}'})).as("a byte order mark").isFalse();
    assertThat(plain(new byte[] {'{', (byte) 0xC0, (byte) 0x80, '}'})).as("overlong").isFalse();
    assertThat(plain(new byte[] {'{', (byte) 0xE0, (byte) 0x80, (byte) 0x80, '}'})).as("overlong").isFalse();
    assertThat(plain(new byte[] {'{', (byte) 0xED, (byte) 0xA0, (byte) 0x80, '}'})).as("a surrogate").isFalse();
    assertThat(plain(new byte[] {'{', (byte) 0xF4, (byte) 0x90, (byte) 0x80, (byte) 0x80, '}'})).as("past U+10FFFF")
        .isFalse();
    assertThat(plain(new byte[] {'{', (byte) 0x80, '}'})).as("a lone continuation").isFalse();
    assertThat(plain(new byte[] {'{', (byte) 0xE6, (byte) 0x97})).as("cut short").isFalse();
    assertThat(plain(new byte[] {'{', (byte) 0xE6, 'a', (byte) 0xA5, '}'})).as("not a continuation").isFalse();
    assertThat(plain(new byte[] {'{', (byte) 0xF0, (byte) 0x9F, (byte) 0x98, (byte) 0x80, '}'})).isTrue();
    byte[] inside = "x{\"a\": 1}y".getBytes(StandardCharsets.UTF_8);
    assertThat(JsonBytes.plain(inside, 1, inside.length - 2)).as("a slice").isTrue();
  }

  static boolean plain(String s) {
    return plain(s.getBytes(StandardCharsets.UTF_8));
  }

  static boolean plain(byte[] b) {
    return JsonBytes.plain(b, 0, b.length);
  }

  @Test
  void aKnownSchemaPartIsSkippedForThePayload() {
    String ddl = "payload STRUCT<id: BIGINT, name: STRING>";
    String head = "{\"schema\":{\"type\":\"struct\",\"fields\":[]}";
    JsonBytes reader = of(ddl, "{\"schema\":{\"type\":\"other\"}", head);
    String message = head + ",\"payload\":{\"id\":5,\"name\":\"n\"}}";
    assertThat(plain(reader.read(message.getBytes(StandardCharsets.UTF_8)), DataType.fromDDL(ddl)))
        .isEqualTo(List.of(List.of(5L, "n"))).isEqualTo(spark(ddl, message));
    String unknown = "{\"schema\":{\"type\":\"new\"},\"payload\":{\"id\":6,\"name\":null}}";
    assertThat(plain(reader.read(unknown.getBytes(StandardCharsets.UTF_8)), DataType.fromDDL(ddl)))
        .isEqualTo(List.of(Arrays.asList(6L, null)));
  }

  @Test
  void aStringColumnsValueIsReadAsItsBytes() {
    String text = "{\"id\": 4, \"name\": \"é\"}";
    assertThat(plain(of("id BIGINT, name STRING").read(UTF8String.fromString(text)),
                     DataType.fromDDL("id BIGINT, name STRING")))
        .isEqualTo(List.of(4L, "é"));
  }

  static final String CHANGES = " {}[]\",:\\0e-.x";

  /** Generated records, and each cut short or with a byte changed, read as Spark reads them. */
  @Test
  void generatedRecordsAreReadAsSparkReadsThem() {
    Random random = new Random(81);
    for (int n = 0; n < 400; n++) {
      String text = record(random);
      assertThat(bytes(DDL, text)).as(text).isEqualTo(spark(DDL, text));
      byte[] b = text.getBytes(StandardCharsets.UTF_8);
      String cut = new String(b, 0, random.nextInt(b.length), StandardCharsets.UTF_8);
      assertThat(bytes(DDL, cut)).as(cut).isEqualTo(spark(DDL, cut));
      b[random.nextInt(b.length)] = (byte) CHANGES.charAt(random.nextInt(CHANGES.length()));
      String changed = new String(b, StandardCharsets.UTF_8);
      assertThat(bytes(DDL, changed)).as(changed).isEqualTo(spark(DDL, changed));
    }
  }

  static String record(Random r) {
    List<String> fields = new ArrayList<>();
    if (r.nextBoolean()) {
      fields.add("\"id\": " + (r.nextInt(4) == 0 ? "null" : Long.toString(r.nextLong() >> r.nextInt(64))));
    }
    if (r.nextBoolean()) {
      fields.add("\"name\": " + (r.nextInt(4) == 0 ? "null" : string(r)));
    }
    if (r.nextBoolean()) {
      fields.add("\"amount\": " + (r.nextInt(4) == 0 ? "null" : (r.nextInt(2000) - 1000) + "." + r.nextInt(100)));
    }
    if (r.nextBoolean()) {
      fields.add("\"ratio\": " + List.of("1.5e3", "-0.0", "3", "2.25E-2", "null").get(r.nextInt(5)));
    }
    if (r.nextBoolean()) {
      fields.add("\"ok\": " + List.of("true", "false", "null").get(r.nextInt(3)));
    }
    if (r.nextBoolean()) {
      fields.add("\"tags\": [" + string(r) + ", null, " + string(r) + "]");
    }
    if (r.nextBoolean()) {
      fields.add("\"inner\": {\"a\": " + r.nextInt() + ", \"b\": [{\"c\": " + string(r) + "}]}");
    }
    if (r.nextBoolean()) {
      fields.add("\"attrs\": {" + string(r) + ": " + r.nextInt(10) + "}");
    }
    if (r.nextBoolean()) {
      fields.add("\"unknown\": {\"deep\": [1, [2, {\"x\": " + string(r) + "}]]}");
    }
    java.util.Collections.shuffle(fields, r);
    return "{" + String.join(", ", fields) + "}";
  }

  static String string(Random r) {
    String[] parts = {"a", "é", "日本", "😀", "\\\"", "\\\\", "\\n", "\\u00e9", "\\ud83d\\ude00", "\\/", " ", "\\t"};
    StringBuilder s = new StringBuilder("\"");
    for (int i = r.nextInt(6); i > 0; i--) {
      s.append(parts[r.nextInt(parts.length)]);
    }
    return s.append('"').toString();
  }
}
