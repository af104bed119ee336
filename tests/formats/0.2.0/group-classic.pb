consumerrange"m-1*>
m-1c"	/10.0.0.9(Èß0à§:
rangesubscriptionB
assignment