SELECT current_user::text
