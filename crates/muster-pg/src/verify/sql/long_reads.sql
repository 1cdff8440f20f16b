SET LOCAL statement_timeout = '30min'
