/** garlicfarm's JVM reader of Raft logs: a columnar DataSource V2 (docs/jvm-reader.md). */
package garlicfarm.spark;
