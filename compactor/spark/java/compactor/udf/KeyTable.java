package compactor.udf;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.catalyst.expressions.XXH64;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.array.ByteArrayMethods;

/**
 * The latest offset of each (partition, key) of a task's narrow rows: an open-addressing table of
 * {@code (hash, arena reference)} pairs with linear probing, and an arena of records {@code [partition: int,
 * length: int, offset: long, key bytes]} in chunks, written in first-seen order. A hash match is confirmed on the
 * key's bytes, so a collision never merges two keys.
 *
 * <p>A table may hold one of several buckets of the keys (those whose 64-bit hash falls in {@code bucket} of
 * {@code buckets}), so that several tasks share a partition's keys; every row counts towards its partition's rows and
 * offsets' mix whatever its bucket.
 */
final class KeyTable {
    private static final int CHUNK = 1 << 22;
    private static final long SEED = 42L;
    private long[] slots = new long[2 << 16];  // hash, reference (chunk << 32 | position + 1; 0 = empty)
    private int mask = (1 << 16) - 1;
    private int size;
    private final List<byte[]> chunks = new ArrayList<>();
    private byte[] chunk;
    private final List<Integer> fills = new ArrayList<>();  // bytes used of each full chunk
    private int used;
    // per partition: rows, lowest and highest offset, the sum of the offsets' mixes (OffsetMasks.digest), keys
    private final Map<Integer, long[]> partitions = new HashMap<>();
    private final long hashMask;
    private final int bucket;
    private final int buckets;
    private int lastPartition = Integer.MIN_VALUE;
    private long[] last;

    /** A table of every key ({@code hashBits} low bits of each hash kept: 64 but in tests, which make keys collide). */
    KeyTable(final int hashBits) {
        this(hashBits, 0, 1);
    }

    /** A table of the keys in {@code bucket} of {@code buckets}. */
    KeyTable(final int hashBits, final int bucket, final int buckets) {
        check(hashBits, bucket, buckets);
        this.hashMask = hashBits == 64 ? -1L : (1L << hashBits) - 1;
        this.bucket = bucket;
        this.buckets = buckets;
    }

    /**
     * Refuse a table's arguments, or narrow rows whose columns are not {@code partition, key, offset} in that order:
     * callers check on the driver, before any task builds a table.
     */
    static void check(final int hashBits, final int bucket, final int buckets, final StructType narrow) {
        check(hashBits, bucket, buckets);
        if (!Arrays.equals(narrow.fieldNames(), new String[] {"partition", "key", "offset"})) {
            throw new IllegalArgumentException("the narrow rows' columns must be partition, key, offset, not "
                    + Arrays.toString(narrow.fieldNames()));
        }
    }

    private static void check(final int hashBits, final int bucket, final int buckets) {
        if (hashBits < 0 || hashBits > 64) {
            throw new IllegalArgumentException("hashBits must be within 0..64, not " + hashBits);
        }
        if (buckets < 1 || bucket < 0 || bucket >= buckets) {
            throw new IllegalArgumentException("bucket " + bucket + " of " + buckets + " does not exist");
        }
    }

    void add(final InternalRow row) {
        final int partition = row.getInt(0);
        if (partition != lastPartition || last == null) {
            lastPartition = partition;
            last = partitions.computeIfAbsent(partition, p -> new long[] {0, Long.MAX_VALUE, Long.MIN_VALUE, 0, 0});
        }
        final long offset = row.getLong(2);
        last[0]++;
        last[1] = Math.min(last[1], offset);
        last[2] = Math.max(last[2], offset);
        last[3] += OffsetMasks.mix(offset);
        if (row.isNullAt(1)) {
            return;
        }
        final Object base;
        final long address;
        final int length;
        if (row instanceof UnsafeRow) {
            final UnsafeRow unsafe = (UnsafeRow) row;
            final long offsetAndSize = unsafe.getLong(1);
            base = unsafe.getBaseObject();
            address = unsafe.getBaseOffset() + (offsetAndSize >>> 32);
            length = (int) offsetAndSize;
        } else {
            final byte[] key = row.getBinary(1);
            base = key;
            address = Platform.BYTE_ARRAY_OFFSET;
            length = key.length;
        }
        final long whole = XXH64.hashUnsafeBytes(base, address, length, SEED + partition);
        if (buckets > 1 && Long.remainderUnsigned(whole >>> 32, buckets) != bucket) {
            return;
        }
        final long hash = whole & hashMask;
        int at = (int) (hash ^ (hash >>> 32)) & mask;
        while (true) {
            final long reference = slots[2 * at + 1];
            if (reference == 0) {
                slots[2 * at] = hash;
                slots[2 * at + 1] = append(partition, offset, base, address, length);
                last[4]++;
                if (++size > (mask + 1) * 3L / 4) {
                    grow();
                }
                return;
            }
            if (slots[2 * at] == hash) {
                final byte[] records = chunks.get((int) (reference >>> 32));
                final int position = (int) reference - 1;
                if (Platform.getInt(records, Platform.BYTE_ARRAY_OFFSET + position) == partition
                        && Platform.getInt(records, Platform.BYTE_ARRAY_OFFSET + position + 4) == length
                        && ByteArrayMethods.arrayEquals(records, Platform.BYTE_ARRAY_OFFSET + position + 16,
                                base, address, length)) {
                    final long stored = Platform.getLong(records, Platform.BYTE_ARRAY_OFFSET + position + 8);
                    if (offset > stored) {
                        Platform.putLong(records, Platform.BYTE_ARRAY_OFFSET + position + 8, offset);
                    }
                    return;
                }
            }
            at = (at + 1) & mask;
        }
    }

    private long append(final int partition, final long offset, final Object base, final long address,
                        final int length) {
        final int need = 16 + ((length + 7) & ~7);
        if (chunk == null || used + need > chunk.length) {
            if (chunk != null) {
                fills.add(used);
            }
            chunk = new byte[Math.max(CHUNK, need)];
            chunks.add(chunk);
            used = 0;
        }
        final long at = Platform.BYTE_ARRAY_OFFSET + used;
        Platform.putInt(chunk, at, partition);
        Platform.putInt(chunk, at + 4, length);
        Platform.putLong(chunk, at + 8, offset);
        Platform.copyMemory(base, address, chunk, at + 16, length);
        final long reference = ((long) (chunks.size() - 1) << 32) | (used + 1);
        used += need;
        return reference;
    }

    private void grow() {
        final long[] old = slots;
        slots = new long[old.length * 2];
        mask = (mask << 1) | 1;
        for (int i = 0; i < old.length; i += 2) {
            if (old[i + 1] != 0) {
                int at = (int) (old[i] ^ (old[i] >>> 32)) & mask;
                while (slots[2 * at + 1] != 0) {
                    at = (at + 1) & mask;
                }
                slots[2 * at] = old[i];
                slots[2 * at + 1] = old[i + 1];
            }
        }
    }

    /** The keys held of each partition. */
    Map<Integer, Long> keysPerPartition() {
        final Map<Integer, Long> out = new HashMap<>();
        for (final Map.Entry<Integer, long[]> entry : partitions.entrySet()) {
            out.put(entry.getKey(), entry.getValue()[4]);
        }
        return out;
    }

    /** Each partition's winners as bits, from the arena (read in order, not through the table). */
    Map<Integer, OffsetMasks> masks() {
        final Map<Integer, OffsetMasks> out = new HashMap<>();
        for (final Map.Entry<Integer, long[]> entry : partitions.entrySet()) {
            final long[] seen = entry.getValue();
            out.put(entry.getKey(), new OffsetMasks(seen[1], seen[2], seen[0], seen[3]));
        }
        slots = null;  // the table is done with; the arena is read once more, in order
        for (int c = 0; c < chunks.size(); c++) {
            final byte[] records = chunks.get(c);
            final int end = c == chunks.size() - 1 ? used : fills.get(c);
            int position = 0;
            while (position < end) {
                final long at = Platform.BYTE_ARRAY_OFFSET + position;
                out.get(Platform.getInt(records, at)).set(Platform.getLong(records, at + 8));
                position += 16 + ((Platform.getInt(records, at + 4) + 7) & ~7);
            }
        }
        chunks.clear();
        return out;
    }
}
