*broker10.0.0.2:9093"liveV
orders$5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a"
retention.ms86400000*
(È8 "