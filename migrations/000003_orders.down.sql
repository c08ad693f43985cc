DROP TABLE stock_releases;
DROP TABLE order_items;
DROP TABLE orders;
