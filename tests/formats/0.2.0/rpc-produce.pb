
(
$5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5aa record batch ˆ'