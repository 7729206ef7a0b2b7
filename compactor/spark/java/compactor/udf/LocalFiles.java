package compactor.udf;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's raw local file system without its permission calls, for the files a task writes to a {@code file:}
 * table. Without Hadoop's native library (which PySpark does not ship), the local file system sets a new file's
 * permission by starting a {@code chmod} process, and its checksummed wrapper (Hadoop's default for
 * {@code file:}) writes a {@code .crc} file beside each file with a {@code chmod} of its own: two processes per
 * file, forked from a task of a driver-sized JVM. Files made here keep the mode they are created with (the
 * process's default, which is what that {@code chmod} applies under the usual umask) and get no checksum file, as
 * the product's other writers (pyarrow's) write them.
 */
public final class LocalFiles extends RawLocalFileSystem {
    /** Hadoop instantiates the {@code fs.file.impl} class by reflection. */
    public LocalFiles() {
        super();
    }

    /**
     * A copy of {@code conf} whose {@code file:} paths resolve to this file system (a fresh instance each time, out
     * of Hadoop's cache of file systems, which is shared by the whole JVM).
     */
    static Configuration configuration(final Configuration conf) {
        final Configuration copy = new Configuration(conf);
        copy.setClassLoader(LocalFiles.class.getClassLoader());
        copy.set("fs.file.impl", LocalFiles.class.getName());
        copy.setBoolean("fs.file.impl.disable.cache", true);
        return copy;
    }

    @Override
    public void setPermission(final Path path, final FsPermission permission) {
        // the file or directory keeps the mode it was created with
    }
}
