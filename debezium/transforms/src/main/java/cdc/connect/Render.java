package cdc.connect;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeParseException;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.connect.data.Schema;

/**
 * What cdc's jobs hash for a masked column's Debezium value: the text Spark writes for the
 * column's target value (CAST(value AS STRING) in a UTC session), as cdc/sources/types.py
 * maps each kind, or a binary column's raw bytes. Null when the value has no target value
 * (the job sets such a change aside) or the kind is not rendered here (arrays).
 */
final class Render {
    static final String SOURCE_TYPE = "__debezium.source.column.type";
    static final String LENGTH = "__debezium.source.column.length";
    static final String SCALE = "__debezium.source.column.scale";
    /** Source types whose Debezium value is the column's text. */
    static final Set<String> TEXT_TYPES = Set.of(
        "TEXT", "VARCHAR", "BPCHAR", "CHAR", "CITEXT", "UUID", "JSON", "JSONB", "INET", "CIDR", "MACADDR",
        "MACADDR8", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT", "ENUM", "SET", "NVARCHAR", "NCHAR");
    /** Debezium's logical names whose value is the column's text. */
    static final Set<String> TEXT_NAMES = Set.of(
        "io.debezium.data.Enum", "io.debezium.data.EnumSet", "io.debezium.data.Uuid", "io.debezium.data.Json",
        "io.debezium.time.Interval");
    // What PostgreSQL's infinite timestamps and dates arrive as (epoch µs, days), and the
    // target values cdc keeps for them (types.py: INF_US, INF_DATE, MAX_TS, MIN_TS).
    static final long INF_US = 9223372036825200000L, NEG_INF_US = -9223372036832400000L;
    static final int INF_DATE = -2147472692, NEG_INF_DATE = -2147472691;
    static final String MAX_TS = "9999-12-31 23:59:59.999999", MIN_TS = "0001-01-01 00:00:00";
    static final int UNCONSTRAINED_LENGTH = 131089;
    static final long MICROS_PER_DAY = 86_400_000_000L;

    private Render() {
    }

    static byte[] message(Schema schema, Object v, boolean postgres) {
        String text = text(schema, v, postgres);
        if (text != null) {
            return text.getBytes(StandardCharsets.UTF_8);
        }
        if (schema.type() == Schema.Type.BYTES && v != null) {
            byte[] raw = bytes(v);
            return "io.debezium.data.Bits".equals(schema.name()) ? reversed(raw) : raw;
        }
        return null;
    }

    static String text(Schema schema, Object v, boolean postgres) {
        String name = schema.name() == null ? "" : schema.name();
        Map<String, String> params = schema.parameters() == null ? Map.of() : schema.parameters();
        String source = params.getOrDefault(SOURCE_TYPE, "").toUpperCase(Locale.ROOT);
        if (v instanceof BigDecimal d) {  // Connect's Decimal: BIGINT UNSIGNED (bigint.unsigned.handling.mode=precise)
            int[] target = decimalType(source, params, postgres);
            return target == null ? null : decimal(d.toPlainString(), target[0], target[1]);
        }
        switch (name) {
            case "io.debezium.time.Date":
                return date(((Number) v).intValue());
            case "io.debezium.time.MicroTimestamp":
                return timestamp(((Number) v).longValue(), 1);
            case "io.debezium.time.Timestamp":
                return timestamp(((Number) v).longValue(), 1000);
            case "io.debezium.time.ZonedTimestamp":
                return zonedTimestamp((String) v);
            case "io.debezium.time.MicroTime":
                return postgres ? timeOfDay(((Number) v).longValue()) : duration(((Number) v).longValue());
            case "io.debezium.time.Time":
                return timeOfDay(((Number) v).longValue() * 1000);
            case "io.debezium.time.ZonedTime":
                return zonedTime((String) v);
            default:
                break;
        }
        switch (schema.type()) {
            case INT8: case INT16: case INT32: case INT64:
                return Long.toString(((Number) v).longValue());
            case FLOAT32:
                return Float.toString((Float) v);
            case FLOAT64:
                return Double.toString((Double) v);
            case BOOLEAN:
                return Boolean.toString((Boolean) v);
            case STRING:
                if (TEXT_NAMES.contains(name) || name.isEmpty() && TEXT_TYPES.contains(source)) {
                    return (String) v;
                }
                int[] target = name.isEmpty() ? decimalType(source, params, postgres) : null;
                return target == null ? null : decimal((String) v, target[0], target[1]);
            default:
                return null;
        }
    }

    /** The target DECIMAL(p, s) of a source type, or null when it is no decimal. */
    static int[] decimalType(String source, Map<String, String> params, boolean postgres) {
        String length = params.get(LENGTH), scale = params.get(SCALE);
        int s = scale == null ? 0 : Integer.parseInt(scale);
        if (postgres && source.equals("NUMERIC")) {
            int p = length == null ? 0 : Integer.parseInt(length);
            return p == 0 || p == UNCONSTRAINED_LENGTH ? new int[] {38, 18} : new int[] {p, s};
        }
        if (postgres && source.equals("MONEY")) {
            return new int[] {19, 2};
        }
        String type = source.split(" ")[0];
        if (!postgres && source.startsWith("BIGINT") && source.contains("UNSIGNED")) {
            return new int[] {20, 0};
        }
        if (!postgres && Set.of("DECIMAL", "NUMERIC", "DEC", "FIXED").contains(type) && length != null) {
            return new int[] {Integer.parseInt(length), s};
        }
        return null;
    }

    static String decimal(String text, int precision, int scale) {
        try {
            BigDecimal d = new BigDecimal(text).setScale(scale, RoundingMode.UNNECESSARY);
            return d.precision() - d.scale() > precision - scale ? null : d.toPlainString();
        } catch (NumberFormatException | ArithmeticException e) {
            return null;  // NaN, infinity, or more digits than the target keeps
        }
    }

    static String date(int days) {
        if (days == INF_DATE) {
            return "9999-12-31";
        }
        if (days == NEG_INF_DATE) {
            return "0001-01-01";
        }
        return LocalDate.ofEpochDay(days).toString();
    }

    static String timestamp(long value, long unit) {
        if (value >= INF_US / unit) {
            return MAX_TS;
        }
        if (value <= NEG_INF_US / unit) {
            return MIN_TS;
        }
        long micros = Math.multiplyExact(value, unit);
        LocalDateTime t = LocalDateTime.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
                                                      (int) Math.floorMod(micros, 1_000_000L) * 1000, ZoneOffset.UTC);
        return t.toLocalDate() + " " + clock(t.toLocalTime());
    }

    static String zonedTimestamp(String text) {
        if (text.equals("infinity")) {
            return MAX_TS;
        }
        if (text.equals("-infinity")) {
            return MIN_TS;
        }
        try {
            LocalDateTime t = OffsetDateTime.parse(text).withOffsetSameInstant(ZoneOffset.UTC).toLocalDateTime();
            return t.toLocalDate() + " " + clock(t.toLocalTime());
        } catch (DateTimeParseException e) {
            return null;
        }
    }

    /** HH:mm:ss with the fraction of a second, trailing zeros left out, as Spark writes it. */
    static String clock(LocalTime t) {
        String out = String.format("%02d:%02d:%02d", t.getHour(), t.getMinute(), t.getSecond());
        int micros = t.getNano() / 1000;
        if (micros == 0) {
            return out;
        }
        String fraction = String.format("%06d", micros).replaceAll("0+$", "");
        return out + "." + fraction;
    }

    /** A time of day as HH:mm:ss.SSSSSS (types.py: time_us, time_ms). */
    static String timeOfDay(long micros) {
        long of = Math.floorMod(micros, MICROS_PER_DAY);
        return String.format("%02d:%02d:%02d.%06d", of / 3_600_000_000L, of / 60_000_000L % 60,
                             of / 1_000_000L % 60, of % 1_000_000L);
    }

    /** A signed duration as [-]HH:MM:SS.ffffff, hours unbounded (types.py: duration_us). */
    static String duration(long micros) {
        long a = Math.abs(micros);
        return (micros < 0 ? "-" : "") + String.format("%02d:%02d:%02d.%06d", a / 3_600_000_000L,
                                                       a / 60_000_000L % 60, a / 1_000_000L % 60, a % 1_000_000L);
    }

    /** A time with zone, e.g. 11:45:56.5Z, as HH:mm:ss.SSSSSSZ (types.py: timetz). */
    static String zonedTime(String text) {
        try {
            LocalTime t = LocalTime.parse(text.endsWith("Z") ? text.substring(0, text.length() - 1) : text);
            return String.format("%02d:%02d:%02d.%06dZ", t.getHour(), t.getMinute(), t.getSecond(), t.getNano() / 1000);
        } catch (DateTimeParseException e) {
            return null;
        }
    }

    static byte[] bytes(Object v) {
        if (v instanceof byte[] b) {
            return b;
        }
        ByteBuffer buffer = ((ByteBuffer) v).duplicate();
        byte[] out = new byte[buffer.remaining()];
        buffer.get(out);
        return out;
    }

    static byte[] reversed(byte[] raw) {
        byte[] out = new byte[raw.length];
        for (int i = 0; i < raw.length; i++) {
            out[i] = raw[raw.length - 1 - i];
        }
        return out;
    }
}
