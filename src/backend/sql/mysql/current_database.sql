-- The database this session works in, which names its migration lock.
SELECT DATABASE()
