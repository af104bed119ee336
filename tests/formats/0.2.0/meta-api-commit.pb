
defaultwal/2/000001.wal€ K
(
$5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5ad Ç(€Ðê¶·3@ Jè
 m(d0Ç