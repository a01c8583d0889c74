package cdc.direct;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.json.JsonToStructsEvaluator;
import org.apache.spark.sql.catalyst.expressions.objects.Invoke;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.catalyst.json.JacksonParser;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.ObjectType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;
import scala.collection.immutable.Seq$;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's {@code from_json} over a record's bytes, with its result. Spark's own reads the text
 * through a {@code java.io.Reader} made for every record (an 8 KB buffer and a charset decoder
 * each time: as much as the parse itself for a change event); this reads the bytes with Jackson's
 * byte parser into the same converters ({@link JacksonParser} of the same schema and options). A
 * record the byte parser refuses (one that does not parse, or is not UTF-8) is read again by
 * Spark's own evaluator, so every result is {@code from_json}'s.
 *
 * <p>With {@code heads}, schema parts a Debezium JSON message may start with: a message starting
 * with one of them followed by {@code ,"payload":} is read from there, as {@code {"payload":...}},
 * without its schema part (most of a change event's bytes), as the decoding's {@code payload} does.
 */
public final class JsonBytes implements Serializable {
  private static final byte[] PAYLOAD = ",\"payload\":".getBytes(StandardCharsets.UTF_8);

  private final DataType schema;  // nullable, as from_json reads it
  private final scala.collection.immutable.Map<String, String> options;
  private final String timeZone;
  private final String corruptColumn;
  private final boolean duplicateKeys;
  private final byte[][] heads;  // checked newest first
  private final String name;
  private transient volatile Reader reader;

  /** One thread's parsers (Spark's are not shared between threads). */
  private static final class Reader {
    final Thread owner = Thread.currentThread();
    final JacksonParser parser;
    final JsonToStructsEvaluator spark;

    Reader(JsonBytes of) {
      JSONOptions parsed = new JSONOptions(of.options, of.timeZone, of.corruptColumn);
      parser = new JacksonParser(of.schema, parsed, false, Seq$.MODULE$.<org.apache.spark.sql.sources.Filter>empty());
      spark = new JsonToStructsEvaluator(of.options, of.schema, of.corruptColumn, Option.apply(of.timeZone),
          of.duplicateKeys);
    }
  }

  @VisibleForTesting
  JsonBytes(DataType schema, Map<String, String> options, List<String> heads, String name) {
    this.schema = schema.asNullable();
    this.options = scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(options));
    SQLConf conf = SQLConf.get();  // what from_json's analysis gives it
    this.timeZone = conf.sessionLocalTimeZone();
    this.corruptColumn = conf.columnNameOfCorruptRecord();
    this.duplicateKeys = (Boolean) conf.getConf(SQLConf.VARIANT_ALLOW_DUPLICATE_KEYS());
    List<byte[]> newestFirst = new ArrayList<>();
    for (int i = heads.size() - 1; i >= 0; i--) {
      newestFirst.add(heads.get(i).getBytes(StandardCharsets.UTF_8));
    }
    this.heads = newestFirst.toArray(new byte[0][]);
    this.name = name;
  }

  /**
   * {@code from_json(child, ddl, options)} as a column, {@code child} a string or binary column;
   * {@code heads} as above (empty: none), in the order they were learnt.
   */
  public static Column column(Column child, String ddl, Map<String, String> options, List<String> heads) {
    DataType type = DataType.fromDDL(ddl);
    JsonBytes of = new JsonBytes(type, options, heads, ddl.length() > 40 ? ddl.substring(0, 40) : ddl);
    Expression target = new Literal(of, new ObjectType(JsonBytes.class));
    Expression read = new Invoke(target, "read", of.schema, seq(ExpressionUtils.expression(child)),
        Seq$.MODULE$.empty(), true, true, true);
    return ExpressionUtils.column(read);
  }

  private static scala.collection.immutable.Seq<Expression> seq(Expression e) {
    return CollectionConverters.asScala(List.of(e)).toList();
  }

  /** The result of a string column's value. */
  public Object read(UTF8String text) {
    byte[] bytes = text.getBytes();
    return read(bytes, 0, bytes.length, text);
  }

  /** The result of a binary column's value. */
  public Object read(byte[] value) {
    int head = head(value);
    if (head < 0) {
      return read(value, 0, value.length, null);
    }
    byte[] rest = new byte[value.length - head];  // `{"payload":...`: the message without its schema part
    rest[0] = '{';
    System.arraycopy(value, head + 1, rest, 1, rest.length - 1);
    return read(rest, 0, rest.length, null);
  }

  private Object read(byte[] bytes, int offset, int length, UTF8String text) {
    Reader r = reader();
    if (plain(bytes, offset, length)) {
      try {
        return converted(CollectionConverters.asJava(r.parser.parse(new Slice(bytes, offset, length), BYTES,
            NO_LITERAL).iterator()));
      } catch (Exception e) {
        // read again below: Spark's own result, whatever it is
      }
    }
    return r.spark.evaluate(text != null ? text : UTF8String.fromBytes(bytes, offset, length));
  }

  private record Slice(byte[] bytes, int offset, int length) {}

  private static final scala.Function2<JsonFactory, Slice, JsonParser> BYTES = (factory, s) -> {
    try {
      return factory.createParser(s.bytes, s.offset, s.length);
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  };
  private static final scala.Function1<Slice, UTF8String> NO_LITERAL = s -> null;

  /**
   * Whether Jackson's byte parser reads {@code bytes} as Spark's reader does: an object or array
   * (no byte order mark, nothing Jackson would take for UTF-16 or UTF-32) of well-formed UTF-8,
   * which both decode alike (Java's decoder replaces what is not; Jackson's may keep it).
   */
  static boolean plain(byte[] b, int offset, int length) {
    if (length < 2 || (b[offset] != '{' && b[offset] != '[')) {
      return false;
    }
    for (int i = offset + 1; i < offset + Math.min(length, 4); i++) {
      if (b[i] == 0) {
        return false;
      }
    }
    int end = offset + length;
    for (int i = offset; i < end; ) {
      int c = b[i] & 0xFF;
      if (c < 0x80) {
        i++;
        continue;
      }
      int n;
      int min;
      int max = 0xBF;
      if (c >= 0xC2 && c <= 0xDF) {
        n = 1;
        min = 0x80;
      } else if (c >= 0xE0 && c <= 0xEF) {
        n = 2;
        min = c == 0xE0 ? 0xA0 : 0x80;  // no overlong form
        max = c == 0xED ? 0x9F : 0xBF;  // no surrogate
      } else if (c >= 0xF0 && c <= 0xF4) {
        n = 3;
        min = c == 0xF0 ? 0x90 : 0x80;
        max = c == 0xF4 ? 0x8F : 0xBF;  // nothing past U+10FFFF
      } else {
        return false;
      }
      if (i + n >= end) {  // cut short
        return false;
      }
      int second = b[i + 1] & 0xFF;
      if (second < min || second > max) {
        return false;
      }
      for (int k = 2; k <= n; k++) {
        int next = b[i + k] & 0xFF;
        if (next < 0x80 || next > 0xBF) {
          return false;
        }
      }
      i += n + 1;
    }
    return true;
  }

  /** from_json's result of the parsed rows: the first (a struct) or the array of them. */
  private Object converted(Iterator<InternalRow> rows) {
    if (schema instanceof StructType) {
      return rows.hasNext() ? rows.next() : null;
    }
    if (schema instanceof ArrayType) {
      return rows.hasNext() ? rows.next().getArray(0) : null;
    }
    return rows.hasNext() ? rows.next().get(0, schema) : null;
  }

  /** Where `,"payload":` follows a known schema part the value starts with (-1: none does). */
  private int head(byte[] value) {
    for (byte[] h : heads) {
      int end = h.length;
      if (value.length >= end + PAYLOAD.length && startsWith(value, h, 0) && startsWith(value, PAYLOAD, end)) {
        return end;  // the comma
      }
    }
    return -1;
  }

  private static boolean startsWith(byte[] value, byte[] part, int at) {
    return java.util.Arrays.equals(value, at, at + part.length, part, 0, part.length);
  }

  private Reader reader() {
    Reader r = reader;
    if (r == null || r.owner != Thread.currentThread()) {
      r = new Reader(this);
      reader = r;
    }
    return r;
  }

  @Override
  public String toString() {
    return "JsonBytes(" + name + ")";
  }
}
