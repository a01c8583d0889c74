package cdc.connect;

import java.nio.charset.StandardCharsets;
import java.security.InvalidKeyException;
import java.security.NoSuchAlgorithmException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.data.Field;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.header.Headers;
import org.apache.kafka.connect.transforms.Transformation;

/**
 * Replaces the values of a Debezium change event's masked columns, in its row before and
 * after the change, by HMAC-SHA256(key, text) in lower-case hex: the hash cdc's jobs make
 * of a masked column, so Kafka never holds the clear value and targets keep comparable
 * hashes. The text is the one the jobs hash: the column's target value as Spark writes it
 * as a string (numbers, dates "2024-05-01", timestamps "2024-05-01 10:00:00.5" in UTC,
 * decimals at the target's scale, the raw bytes of a binary column); see `Render`. A
 * masked column that is not text becomes an optional string field with its source type
 * parameters kept. The header cdc.masked says which key (its fingerprint, as cdc's
 * key_fingerprint) and which columns: "fingerprint:column,column"; the job hashes the
 * others. A value the job would set aside (a NaN decimal, an unparsable timestamp) and an
 * array are left to the job. A TOASTed value's placeholder is left as it is. The key comes
 * from a config provider reference, so the connector's REST config never shows it.
 */
public class MaskColumns<R extends ConnectRecord<R>> implements Transformation<R> {
    public static final String COLUMNS = "columns";
    /** Ends in "password", so Debezium masks it where it logs a connector's configuration. */
    public static final String KEY = "key.password";
    public static final String PLACEHOLDER = "unavailable.value.placeholder";
    public static final String HEADER = "cdc.masked";
    static final byte[] FINGERPRINT_TEXT = "cdc masking key fingerprint".getBytes(StandardCharsets.UTF_8);

    private static final ConfigDef CONFIG = new ConfigDef()
        .define(COLUMNS, ConfigDef.Type.LIST, ConfigDef.Importance.HIGH,
                "the masked columns as schema.table.column (MariaDB: database.table.column)")
        .define(KEY, ConfigDef.Type.PASSWORD, ConfigDef.Importance.HIGH,
                "the HMAC-SHA256 key (its UTF-8 bytes): a config provider reference")
        .define(PLACEHOLDER, ConfigDef.Type.STRING, "__debezium_unavailable_value", ConfigDef.Importance.LOW,
                "the connector's unavailable.value.placeholder (an unchanged TOASTed value)");

    private final Map<String, Set<String>> byTable = new HashMap<>();
    /** Envelope schemas with masked fields as strings, by original schema and masked columns. */
    private final Map<Schema, Map<List<String>, Schema>> schemas = new IdentityHashMap<>();
    private Mac mac;
    private String fingerprint;
    private String placeholder;

    @Override
    public void configure(Map<String, ?> props) {
        AbstractConfig config = new AbstractConfig(CONFIG, props);
        byTable.clear();
        schemas.clear();
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
        Struct source = schema.field("source") == null ? null : value.getStruct("source");
        boolean postgres = source == null || source.schema().field("connector") == null
            || "postgresql".equals(source.getString("connector"));
        Schema row = schema.field("after").schema();
        Struct before = value.getStruct("before"), after = value.getStruct("after");
        // a column is hashed in both rows or in neither: the header names it for both
        Map<String, byte[][]> messages = new TreeMap<>();
        for (String column : columns) {
            Field field = row.field(column);
            if (field == null) {
                continue;
            }
            byte[][] both = new byte[2][];
            boolean ok = true;
            Struct[] rows = {before, after};
            for (int i = 0; i < 2 && ok; i++) {
                Object v = rows[i] == null ? null : rows[i].get(column);
                if (v != null && !isPlaceholder(v)) {
                    both[i] = Render.message(field.schema(), v, postgres);
                    ok = both[i] != null;
                }
            }
            if (ok) {
                messages.put(column, both);
            }
        }
        if (messages.isEmpty()) {
            return record;
        }
        List<String> masked = new ArrayList<>(messages.keySet());
        Schema out = maskedSchema(schema, masked);
        Schema outRow = out.field("after").schema();
        Struct copy = new Struct(out);
        for (Field f : schema.fields()) {
            Object v = value.get(f);
            int i = f.name().equals("before") ? 0 : f.name().equals("after") ? 1 : -1;
            copy.put(f.name(), i >= 0 && v != null ? masked((Struct) v, outRow, messages, i) : v);
        }
        Headers headers = record.headers().duplicate();
        headers.addString(HEADER, fingerprint + ":" + String.join(",", masked));
        return record.newRecord(record.topic(), record.kafkaPartition(), record.keySchema(), record.key(),
                                out, copy, record.timestamp(), headers);
    }

    private boolean isPlaceholder(Object v) {
        return v.equals(placeholder)
            || v instanceof byte[] b && Arrays.equals(b, placeholder.getBytes(StandardCharsets.UTF_8))
            || v instanceof ByteBuffer b && b.equals(ByteBuffer.wrap(placeholder.getBytes(StandardCharsets.UTF_8)));
    }

    private Struct masked(Struct row, Schema outRow, Map<String, byte[][]> messages, int which) {
        Struct out = new Struct(outRow);
        for (Field f : row.schema().fields()) {
            byte[][] both = messages.get(f.name());
            Object v = row.get(f);
            if (both == null || v == null) {
                out.put(f.name(), v);
            } else if (both[which] != null) {
                out.put(f.name(), hex(mac.doFinal(both[which])));
            } else if (f.schema().type() == Schema.Type.BYTES) {  // a placeholder, as the JSON converter writes it
                out.put(f.name(), Base64.getEncoder().encodeToString(placeholder.getBytes(StandardCharsets.UTF_8)));
            } else {
                out.put(f.name(), v);
            }
        }
        return out;
    }

    /** The envelope schema whose rows have the `masked` columns as optional strings. */
    private Schema maskedSchema(Schema envelope, List<String> masked) {
        Schema row = envelope.field("after").schema();
        if (masked.stream().allMatch(c -> row.field(c).schema().type() == Schema.Type.STRING)) {
            return envelope;
        }
        if (schemas.size() > 256) {
            schemas.clear();
        }
        return schemas.computeIfAbsent(envelope, e -> new HashMap<>()).computeIfAbsent(masked, m -> {
            Schema outRow = copy(row, field -> {
                if (!m.contains(field.name()) || field.schema().type() == Schema.Type.STRING) {
                    return field.schema();
                }
                SchemaBuilder text = SchemaBuilder.string().optional();
                if (field.schema().parameters() != null) {
                    text.parameters(field.schema().parameters());
                }
                return text.build();
            });
            return copy(envelope, field -> field.name().equals("before") || field.name().equals("after")
                ? outRow : field.schema());
        });
    }

    private static Schema copy(Schema struct, java.util.function.Function<Field, Schema> fieldSchema) {
        SchemaBuilder b = SchemaBuilder.struct().name(struct.name()).version(struct.version()).doc(struct.doc());
        if (struct.parameters() != null) {
            b.parameters(struct.parameters());
        }
        if (struct.isOptional()) {
            b.optional();
        }
        for (Field f : struct.fields()) {
            b.field(f.name(), fieldSchema.apply(f));
        }
        return b.build();
    }

    static String hex(byte[] bytes) {
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
