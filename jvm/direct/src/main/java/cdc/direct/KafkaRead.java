package cdc.direct;

import java.io.Serializable;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.TaskCompletionListener;

/**
 * The Kafka records of several topics' offset ranges, read in a task by one consumer: one fetch
 * asks the broker for every partition at once, where the Kafka source reads each partition on its
 * own (and plans the read in the driver, asking Kafka for the partitions' offsets first). Its rows
 * are the Kafka source's, headers included; each partition's in offset order. Consumers are kept
 * in the JVM between reads, one per read under way, by their properties.
 */
public final class KafkaRead implements Serializable {
  /** Spark's Kafka source's columns with its headers, in its order. */
  static final List<String> COLUMNS = List.of("key", "value", "topic", "partition", "offset", "timestamp",
      "timestampType", "headers");
  static final long EARLIEST = -2;  // a start that reads from the partition's first record (jobs/shared.py's)
  private static final int KEPT = 4;  // consumers kept idle at most, for each set of properties
  private static final Map<Map<String, String>, ConcurrentLinkedDeque<KafkaConsumer<byte[], byte[]>>> IDLE =
      new ConcurrentHashMap<>();

  private final Map<String, String> properties;
  private final long timeoutMs;
  private final List<Range> ranges = new ArrayList<>();

  private record Range(String topic, int partition, long start, long end) implements Serializable {}

  private KafkaRead(Map<String, String> properties, long timeoutMs) {
    this.properties = properties;
    this.timeoutMs = timeoutMs;
  }

  /**
   * A read of {@code ranges} (topic to {start, end}, each partition to its offset: a start of -2 or
   * one a partition lacks reads from its first record; the end is not read) by a consumer of Kafka
   * {@code properties} (bootstrap servers, security), failing when a partition brings nothing for
   * {@code timeoutMs}.
   */
  public static KafkaRead of(Map<?, ?> properties, Map<?, ?> ranges, long timeoutMs) {
    Map<String, String> props = new HashMap<>();
    properties.forEach((k, v) -> props.put(String.valueOf(k), String.valueOf(v)));
    KafkaRead read = new KafkaRead(Collections.unmodifiableMap(props), timeoutMs);
    ranges.forEach((topic, startEnd) -> {
      List<?> pair = (List<?>) startEnd;
      Map<?, ?> start = (Map<?, ?>) pair.get(0);
      ((Map<?, ?>) pair.get(1)).forEach((p, end) -> {
        int partition = ((Number) p).intValue();
        Object from = start.get(p);
        read.ranges.add(new Range(String.valueOf(topic), partition,
            from == null ? EARLIEST : ((Number) from).longValue(), ((Number) end).longValue()));
      });
    });
    return read;
  }

  /** Its records as rows of the Kafka source's {@code schema} (with headers). */
  Iterator<InternalRow> rows(StructType schema) {
    if (!List.of(schema.fieldNames()).equals(COLUMNS)) {
      throw new IllegalArgumentException("not the Kafka source's columns with headers: " + schema.simpleString());
    }
    Records records = new Records(UnsafeProjection.create(schema));
    TaskContext task = TaskContext.get();
    if (task != null) {  // a task that ends before its read does (failed, cancelled) closes its consumer
      task.addTaskCompletionListener((TaskCompletionListener) context -> records.close());
    }
    return records;
  }

  private KafkaConsumer<byte[], byte[]> borrowed() {
    KafkaConsumer<byte[], byte[]> consumer = IDLE.computeIfAbsent(properties, k -> new ConcurrentLinkedDeque<>())
        .pollFirst();
    if (consumer != null) {
      return consumer;
    }
    Properties props = new Properties();
    props.putAll(properties);
    props.put("enable.auto.commit", "false");
    props.put("auto.offset.reset", "none");  // a range Kafka no longer holds is an error, never skipped
    return new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  private void returned(KafkaConsumer<byte[], byte[]> consumer) {
    consumer.assign(List.of());
    ConcurrentLinkedDeque<KafkaConsumer<byte[], byte[]>> idle = IDLE.get(properties);
    if (idle.size() < KEPT) {
      idle.addFirst(consumer);
    } else {
      consumer.close(Duration.ZERO);
    }
  }

  /** The rows as they come from the consumer's polls, each partition until its end. */
  private final class Records implements Iterator<InternalRow> {
    private final UnsafeProjection unsafe;
    private final Map<TopicPartition, Long> ends = new HashMap<>();
    private final ArrayDeque<ConsumerRecord<byte[], byte[]>> fetched = new ArrayDeque<>();
    private KafkaConsumer<byte[], byte[]> consumer;

    Records(UnsafeProjection unsafe) {
      this.unsafe = unsafe;
      for (Range r : ranges) {
        if (r.end > Math.max(r.start, 0)) {
          ends.put(new TopicPartition(r.topic, r.partition), r.end);
        }
      }
      if (ends.isEmpty()) {
        return;
      }
      consumer = borrowed();
      try {
        consumer.assign(ends.keySet());
        for (Range r : ranges) {
          TopicPartition tp = new TopicPartition(r.topic, r.partition);
          if (!ends.containsKey(tp)) {
            continue;
          }
          if (r.start == EARLIEST) {
            consumer.seekToBeginning(List.of(tp));
          } else {
            consumer.seek(tp, r.start);
          }
        }
      } catch (RuntimeException e) {
        consumer.close(Duration.ZERO);
        consumer = null;
        throw e;
      }
    }

    /** Close the consumer, unless it was given back at the end of the read. */
    void close() {
      if (consumer != null) {
        consumer.close(Duration.ZERO);
        consumer = null;
      }
    }

    @Override
    public boolean hasNext() {
      while (fetched.isEmpty() && consumer != null) {
        if (ends.isEmpty()) {
          returned(consumer);
          consumer = null;
          break;
        }
        try {
          poll();
        } catch (RuntimeException e) {
          consumer.close(Duration.ZERO);
          consumer = null;
          throw e;
        }
      }
      return !fetched.isEmpty();
    }

    private void poll() {
      long began = System.currentTimeMillis();
      while (true) {
        try {
          for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
            Long end = ends.get(new TopicPartition(r.topic(), r.partition()));
            if (end != null && r.offset() < end) {
              fetched.add(r);
            }
          }
        } catch (OffsetOutOfRangeException e) {
          throw new IllegalStateException("data loss: Kafka no longer holds the offsets to read "
              + e.offsetOutOfRangePartitions() + " (its retention removed them)", e);
        }
        List<TopicPartition> done = new ArrayList<>();
        for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
          if (consumer.position(e.getKey()) >= e.getValue()) {  // past markers and compacted gaps too
            done.add(e.getKey());
          }
        }
        if (!done.isEmpty()) {
          consumer.pause(done);
          done.forEach(ends::remove);
        }
        if (!fetched.isEmpty() || ends.isEmpty()) {
          return;
        }
        if (System.currentTimeMillis() - began > timeoutMs) {
          throw new IllegalStateException("Kafka brought no record of " + ends.keySet() + " in " + timeoutMs
              + " ms (the offsets to read up to: " + ends + ")");
        }
      }
    }

    @Override
    public InternalRow next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      ConsumerRecord<byte[], byte[]> r = fetched.poll();
      List<InternalRow> headers = new ArrayList<>();
      for (Header h : r.headers()) {
        headers.add(new GenericInternalRow(new Object[] {UTF8String.fromString(h.key()), h.value()}));
      }
      return unsafe.apply(new GenericInternalRow(new Object[] {
          r.key(), r.value(), UTF8String.fromString(r.topic()), r.partition(), r.offset(),
          r.timestamp() * 1000L, r.timestampType().id, headers.isEmpty() ? null : new GenericArrayData(headers.toArray())}));
    }
  }
}
