
$
InvalidRecordkeyless
no keyd ÿÿÿÿÿÿÿÿÿ