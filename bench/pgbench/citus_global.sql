SELECT ok FROM rate_limiter.rate_limit('citus_global16');
