SELECT now()
