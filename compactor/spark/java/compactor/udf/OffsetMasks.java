package compactor.udf;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.HashMap;
import java.util.Map;

/**
 * A topic partition's winners over a range: a bit per offset, set for each key's latest one, with the count of the
 * range's rows and the sum of a 64-bit mix of their offsets ({@link #mix}), by which the rows a pass reads are
 * checked against those the winners were found in. The bits are an array over the partition's offsets from its
 * lowest, or a map of 64-bit words where the offsets are sparse (a mirrored topic's gaps), so memory follows the
 * rows, never the offsets' span.
 */
final class OffsetMasks {
    final long first;
    final long last;
    final long rows;
    final long digest;
    private final long[] words;
    private final HashMap<Long, long[]> sparse;

    private OffsetMasks(final long first, final long last, final long rows, final long digest, final long[] words,
                        final HashMap<Long, long[]> sparse) {
        this.first = first;
        this.last = last;
        this.rows = rows;
        this.digest = digest;
        this.words = words;
        this.sparse = sparse;
    }

    OffsetMasks(final long first, final long last, final long rows, final long digest) {
        this.first = first;
        this.last = last;
        this.rows = rows;
        this.digest = digest;
        final long span = ((last - first) >>> 6) + 1;
        this.words = span <= 2 * rows + 1024 ? new long[(int) span] : null;
        this.sparse = words == null ? new HashMap<>() : null;
    }

    /** An offset's 64-bit mix (SplitMix64's finaliser): sums of mixes tell two reads' offsets apart. */
    static long mix(final long offset) {
        long z = offset * 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    void set(final long offset) {
        final long at = offset - first;
        if (words != null) {
            words[(int) (at >>> 6)] |= 1L << (at & 63);
        } else {
            sparse.computeIfAbsent(at >>> 6, w -> new long[1])[0] |= 1L << (at & 63);
        }
    }

    boolean latest(final long offset) {
        final long at = offset - first;
        if (at < 0 || offset > last) {
            throw new IllegalStateException("offset " + offset + " is outside the range read for its winners");
        }
        final long word;
        if (words != null) {
            word = words[(int) (at >>> 6)];
        } else {
            final long[] held = sparse.get(at >>> 6);
            word = held == null ? 0 : held[0];
        }
        return (word & (1L << (at & 63))) != 0;
    }

    /** Whether {@code other} was found over the same rows (offsets, count and mix). */
    boolean sameRows(final OffsetMasks other) {
        return first == other.first && last == other.last && rows == other.rows && digest == other.digest;
    }

    /** Set the bits {@code other} sets, found over the same rows (another bucket of the same keys' hashes). */
    void add(final OffsetMasks other) {
        if (!sameRows(other)) {
            throw new IllegalStateException("the winners of one partition were found over different rows");
        }
        if (words != null) {
            for (int i = 0; i < words.length; i++) {
                words[i] |= other.words[i];
            }
        } else {
            for (final Map.Entry<Long, long[]> entry : other.sparse.entrySet()) {
                sparse.computeIfAbsent(entry.getKey(), w -> new long[1])[0] |= entry.getValue()[0];
            }
        }
    }

    /** The 64-bit words that hold at least one winner's bit. */
    long words() {
        if (words == null) {
            return sparse.size();
        }
        long count = 0;
        for (final long word : words) {
            if (word != 0) {
                count++;
            }
        }
        return count;
    }

    /** Write the masks to {@code out} (read back by {@link #read}). */
    void write(final DataOutputStream out) throws IOException {
        out.writeLong(first);
        out.writeLong(last);
        out.writeLong(rows);
        out.writeLong(digest);
        out.writeBoolean(words != null);
        if (words != null) {
            out.writeInt(words.length);
            for (final long word : words) {
                out.writeLong(word);
            }
        } else {
            out.writeInt(sparse.size());
            for (final Map.Entry<Long, long[]> entry : sparse.entrySet()) {
                out.writeLong(entry.getKey());
                out.writeLong(entry.getValue()[0]);
            }
        }
    }

    /** Masks as {@link #write} wrote them. */
    static OffsetMasks read(final DataInputStream in) throws IOException {
        final long first = in.readLong();
        final long last = in.readLong();
        final long rows = in.readLong();
        final long digest = in.readLong();
        final boolean dense = in.readBoolean();
        final int count = in.readInt();
        if (dense) {
            final long[] words = new long[count];
            for (int i = 0; i < count; i++) {
                words[i] = in.readLong();
            }
            return new OffsetMasks(first, last, rows, digest, words, null);
        }
        final HashMap<Long, long[]> sparse = new HashMap<>();
        for (int i = 0; i < count; i++) {
            final long word = in.readLong();
            sparse.put(word, new long[] {in.readLong()});
        }
        return new OffsetMasks(first, last, rows, digest, null, sparse);
    }
}
