package cdc.connect;

import java.nio.charset.StandardCharsets;
import java.security.InvalidKeyException;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.header.Headers;
import org.apache.kafka.connect.transforms.Transformation;

/**
 * Replaces the text of a Debezium change event's masked columns, in its row before and
 * after the change, by HMAC-SHA256(key, text) in lower-case hex: the hash cdc's jobs make
 * of a masked column, so Kafka never holds the clear value and targets keep comparable
 * hashes. Only text columns are hashed here (a schema of type STRING whose source type,
 * from column.propagate.source.type, is a text type): their text is the value the job
 * would hash. The header cdc.masked says which key (its fingerprint, as cdc's
 * key_fingerprint) and which columns: "fingerprint:column,column"; the job hashes the
 * others, and sets aside a record hashed with another key than its target's. A TOASTed
 * value's placeholder is left as it is. The key comes from a config provider reference, so
 * the connector's REST config never shows it.
 */
public class MaskColumns<R extends ConnectRecord<R>> implements Transformation<R> {
    public static final String COLUMNS = "columns";
    /** Ends in "password", so Debezium masks it where it logs a connector's configuration. */
    public static final String KEY = "key.password";
    public static final String PLACEHOLDER = "unavailable.value.placeholder";
    public static final String HEADER = "cdc.masked";
    static final String SOURCE_TYPE = "__debezium.source.column.type";
    /** Source types whose Debezium value is the column's text, as the job decodes it. */
    static final Set<String> TEXT_TYPES = Set.of(
        "TEXT", "VARCHAR", "BPCHAR", "CHAR", "CITEXT", "UUID", "JSON", "JSONB", "INET", "CIDR", "MACADDR",
        "MACADDR8", "TINYTEXT", "MEDIUMTEXT", "LONGTEXT", "ENUM", "SET", "NVARCHAR", "NCHAR");
    /** Debezium's text types with a logical name: their value is the column's text too. */
    static final Set<String> TEXT_NAMES = Set.of(
        "io.debezium.data.Enum", "io.debezium.data.EnumSet", "io.debezium.data.Uuid", "io.debezium.data.Json");
    static final byte[] FINGERPRINT_TEXT = "cdc masking key fingerprint".getBytes(StandardCharsets.UTF_8);

    private static final ConfigDef CONFIG = new ConfigDef()
        .define(COLUMNS, ConfigDef.Type.LIST, ConfigDef.Importance.HIGH,
                "the masked columns as schema.table.column (MariaDB: database.table.column)")
        .define(KEY, ConfigDef.Type.PASSWORD, ConfigDef.Importance.HIGH,
                "the HMAC-SHA256 key (its UTF-8 bytes): a config provider reference")
        .define(PLACEHOLDER, ConfigDef.Type.STRING, "__debezium_unavailable_value", ConfigDef.Importance.LOW,
                "the connector's unavailable.value.placeholder (an unchanged TOASTed value)");

    private final Map<String, Set<String>> byTable = new HashMap<>();
    private Mac mac;
    private String fingerprint;
    private String placeholder;

    @Override
    public void configure(Map<String, ?> props) {
        AbstractConfig config = new AbstractConfig(CONFIG, props);
        byTable.clear();
        for (String column : config.getList(COLUMNS)) {
            int dot = column.lastIndexOf('.');
            if (dot <= 0 || column.indexOf('.') == dot) {
                throw new ConfigException(COLUMNS, column, "expected schema.table.column");
            }
            byTable.computeIfAbsent(column.substring(0, dot), t -> new HashSet<>()).add(column.substring(dot + 1));
        }
        Password secret = config.getPassword(KEY);
        if (secret == null || secret.value().isEmpty()) {
            throw new ConfigException(KEY, "[hidden]", "the masking key is empty");
        }
        try {
            mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret.value().getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
        } catch (NoSuchAlgorithmException | InvalidKeyException e) {
            throw new ConfigException("HmacSHA256 is not available: " + e.getMessage());
        }
        fingerprint = hex(mac.doFinal(FINGERPRINT_TEXT)).substring(0, 16);
        placeholder = config.getString(PLACEHOLDER);
    }

    @Override
    public R apply(R record) {
        if (!(record.value() instanceof Struct) || record.topic() == null) {
            return record;  // a tombstone, or not a change event
        }
        int dot = record.topic().indexOf('.');
        Set<String> columns = dot < 0 ? null : byTable.get(record.topic().substring(dot + 1));
        Struct value = (Struct) record.value();
        Schema schema = value.schema();
        if (columns == null || schema.field("after") == null || schema.field("before") == null) {
            return record;
        }
        Schema row = schema.field("after").schema();
        List<String> masked = new ArrayList<>();
        for (String column : columns) {
            Field field = row.field(column);
            if (field != null && isText(field.schema())) {
                masked.add(column);
            }
        }
        if (masked.isEmpty()) {
            return record;
        }
        masked.sort(null);
        Struct copy = new Struct(schema);
        for (Field f : schema.fields()) {
            Object v = value.get(f);
            boolean isRow = f.name().equals("before") || f.name().equals("after");
            copy.put(f, isRow && v != null ? masked((Struct) v, masked) : v);
        }
        Headers headers = record.headers().duplicate();
        headers.addString(HEADER, fingerprint + ":" + String.join(",", masked));
        return record.newRecord(record.topic(), record.kafkaPartition(), record.keySchema(), record.key(),
                                schema, copy, record.timestamp(), headers);
    }

    private Struct masked(Struct row, List<String> columns) {
        Struct out = new Struct(row.schema());
        for (Field f : row.schema().fields()) {
            out.put(f, row.get(f));
        }
        for (String column : columns) {
            Object v = row.get(column);
            if (v instanceof String text && !text.equals(placeholder)) {
                out.put(column, hex(mac.doFinal(text.getBytes(StandardCharsets.UTF_8))));
            }
        }
        return out;
    }

    static boolean isText(Schema schema) {
        if (schema.type() != Schema.Type.STRING) {
            return false;
        }
        if (schema.name() != null) {
            return TEXT_NAMES.contains(schema.name());
        }
        String source = schema.parameters() == null ? null : schema.parameters().get(SOURCE_TYPE);
        return source != null && TEXT_TYPES.contains(source.toUpperCase());
    }

    private static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder(bytes.length * 2);
        for (byte b : bytes) {
            out.append(Character.forDigit((b >> 4) & 0xF, 16)).append(Character.forDigit(b & 0xF, 16));
        }
        return out.toString();
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }

    @Override
    public void close() {
    }
}
