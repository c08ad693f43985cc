DROP TABLE holdings;
