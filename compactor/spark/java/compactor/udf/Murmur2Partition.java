package compactor.udf;

import org.apache.spark.sql.api.java.UDF2;

/**
 * Kafka's default partitioner as a compiled Spark function: {@code Utils.toPositive(Utils.murmur2(key)) % n}.
 *
 * <p>Called by Spark's generated code with the key's own bytes (no decoding, no reflection per row). A null key
 * gives null (the producer sends keyless rows round-robin). The hash is Kafka's {@code Utils.murmur2} line for
 * line (seed {@code 0x9747b28c}); {@code compactor.topics.partitioner} is its Python and numpy twin, and the
 * tests check all three on random binary, empty and non-UTF-8 keys.
 */
public final class Murmur2Partition implements UDF2<byte[], Integer, Integer> {
    private static final long serialVersionUID = 1L;

    /** Kafka's {@code Utils.murmur2}: the 32-bit MurmurHash2 of {@code data} with Kafka's seed. */
    public static int murmur2(final byte[] data) {
        final int length = data.length;
        final int seed = 0x9747b28c;
        final int m = 0x5bd1e995;
        final int r = 24;
        int h = seed ^ length;
        final int length4 = length / 4;
        for (int i = 0; i < length4; i++) {
            final int i4 = i * 4;
            int k = (data[i4] & 0xff) + ((data[i4 + 1] & 0xff) << 8) + ((data[i4 + 2] & 0xff) << 16)
                    + ((data[i4 + 3] & 0xff) << 24);
            k *= m;
            k ^= k >>> r;
            k *= m;
            h *= m;
            h ^= k;
        }
        switch (length % 4) {
            case 3:
                h ^= (data[(length & ~3) + 2] & 0xff) << 16;
            case 2:
                h ^= (data[(length & ~3) + 1] & 0xff) << 8;
            case 1:
                h ^= data[length & ~3] & 0xff;
                h *= m;
            default:
        }
        h ^= h >>> 13;
        h *= m;
        h ^= h >>> 15;
        return h;
    }

    /** Kafka's {@code Utils.toPositive(murmur2(key)) % partitions}. */
    public static int partition(final byte[] key, final int partitions) {
        return (murmur2(key) & 0x7fffffff) % partitions;
    }

    @Override
    public Integer call(final byte[] key, final Integer partitions) {
        if (key == null || partitions == null) {
            return null;
        }
        return partition(key, partitions);
    }
}
